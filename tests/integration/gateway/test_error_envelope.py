"""The gateway's error envelope everywhere, a 500 with a logged id for bugs, and /healthz that never
waits behind the Kafka proxy (real Redis and SeaweedFS; uvicorn for the concurrency test)."""

from __future__ import annotations

import logging
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.support.local_url import LOCAL_URL
from tests.support.agent_env import agent_settings
from tests.support.fixtures import FIXTURES
from tests.support.gateway_env import gateway_settings, pinterest_bucket
from tests.support.stack_env import gateway_server
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.registry import Registry
from tiered_kafka_gateway.app import create_app

pytestmark = pytest.mark.integration


@pytest.fixture
def agent(redis_server, s3_server, s3_bucket):
    """A cluster whose bucket holds one partition (``served-0``, Pinterest's layout)."""
    settings = agent_settings(FIXTURES, redis_server, s3_server, s3_bucket)
    pinterest_bucket(s3_server, s3_bucket, Keyspace(settings.s3.prefix, settings.cluster, settings.s3.entropy_bits), "served", segments=1)
    return settings


def test_unrouted_paths_and_wrong_methods_answer_in_the_error_envelope(agent, s3_server) -> None:
    client = TestClient(create_app(gateway_settings(agent, s3_server)), base_url=LOCAL_URL)
    plan = f"/v1/clusters/{agent.cluster}/topics/served/partitions/0/plan?offset=0"
    assert client.get(plan).status_code == 200
    unrouted = client.get("/v1/no-such-route")
    assert unrouted.status_code == 404
    assert unrouted.json() == {"error": {"code": "not_found", "message": "no route GET /v1/no-such-route"}}
    for call in (client.post, client.delete, client.put):
        wrong = call(plan)
        assert wrong.status_code == 405 and wrong.headers["allow"] == "GET"
        assert wrong.json()["error"]["code"] == "method_not_allowed" and "is not allowed" in wrong.json()["error"]["message"]


class BrokenRegistry(Registry):
    """A registry client with a bug: what an unexpected exception looks like to the gateway."""

    def find(self, topic: str, partition: int, offset: int):  # type: ignore[no-untyped-def]
        raise RuntimeError("deliberately broken: secret-internal-detail")


def test_an_unexpected_exception_is_a_500_internal_error_whose_id_is_logged(agent, s3_server, caplog) -> None:
    app = create_app(gateway_settings(agent, s3_server, cache={"segment_ttl_s": 0}))
    reader = app.state.readers[agent.cluster]
    reader.registry = BrokenRegistry(reader.redis, reader.name)
    client = TestClient(app, base_url=LOCAL_URL)  # raise_server_exceptions stays on: the exception must not escape the app
    with caplog.at_level(logging.ERROR, logger="tiered_kafka_gateway.errors"):
        response = client.get(f"/v1/clusters/{agent.cluster}/topics/served/partitions/0/plan?offset=0")
    assert response.status_code == 500 and response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "internal_error" and re.fullmatch(r"[0-9a-f]{16}", error["error_id"])
    assert error["error_id"] in error["message"]
    assert "secret-internal-detail" not in response.text and "RuntimeError" not in response.text  # no internals
    logged = [r for r in caplog.records if error["error_id"] in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert "secret-internal-detail" in str(logged[0].exc_info[1])  # the traceback is in the log, under the id
    # the other routes still answer: the topic listing does not call find
    topics = client.get(f"/v1/clusters/{agent.cluster}/topics")
    assert topics.status_code == 200 and "served" in topics.text


#: AnyIO's default thread limiter: the worker threads every sync route of the gateway runs on
WORKER_THREADS = 40


def _kafka_calls(http: httpx.Client, cluster: str) -> int:
    """The gateway's own count of calls that entered its Kafka pool (``/metrics``, an async route)."""
    text = http.get("/metrics").text
    found = re.search(rf'^tiered_kafka_gateway_kafka_proxy_calls_total{{cluster="{re.escape(cluster)}"}} (\S+)$', text, re.MULTILINE)
    return int(float(found.group(1))) if found else 0


def test_healthz_answers_at_once_while_the_kafka_proxy_holds_every_worker_thread(agent, s3_server) -> None:
    """Records in KAFKA_ONLY against a Kafka that never answers (a listening socket nobody accepts
    on) occupy every worker thread: each is inside the Kafka pool, holding one of its 2 slots or
    waiting up to ``timeout_s`` for one. Saturation is observed, not assumed: the gateway's
    ``kafka_proxy_calls`` metric counts the calls that entered the pool, so once it reaches the
    number of worker threads, no thread is free until the first timeout. Then /healthz (async)
    answers well within 2 s, while a sync route demonstrably waits for a thread (over 3 s): the
    test fails if /healthz becomes a plain ``def``."""
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(0)
    bootstrap = f"127.0.0.1:{blackhole.getsockname()[1]}"
    timeout_s = 12  # how long every worker thread stays blocked: the window the checks run in
    records = f"/v1/clusters/{agent.cluster}/topics/served/partitions/0/records?offset=0&mode=KAFKA_ONLY"
    try:
        with gateway_server(agent, s3_server, bootstrap, kafka={"max_concurrency": 2, "timeout_s": timeout_s}) as url, httpx.Client(base_url=url, timeout=120, limits=httpx.Limits(max_connections=WORKER_THREADS + 10)) as http:
            with ThreadPoolExecutor(WORKER_THREADS) as pool:
                sent = time.monotonic()
                pending = [pool.submit(http.get, records) for _ in range(WORKER_THREADS)]
                while (calls := _kafka_calls(http, agent.cluster)) < WORKER_THREADS:
                    assert time.monotonic() - sent < timeout_s / 2, f"only {calls} of {WORKER_THREADS} requests reached the Kafka pool"
                    time.sleep(0.05)
                assert not any(p.done() for p in pending), "the Kafka proxy did not block: the test proves nothing"
                for _ in range(5):
                    started = time.monotonic()
                    health = http.get("/healthz")
                    assert health.status_code == 200 and time.monotonic() - started < 2.0, time.monotonic() - started
                # a sync route does queue behind the saturated pool until the first Kafka timeout
                started = time.monotonic()
                assert http.get("/v1/clusters").status_code == 200
                assert time.monotonic() - started > 3.0, "a sync route got a worker thread at once: the pool was not saturated"
                answers = [p.result() for p in pending]
            assert {(a.status_code, a.json()["error"]["code"]) for a in answers} == {(503, "kafka_unavailable")}
    finally:
        blackhole.close()
