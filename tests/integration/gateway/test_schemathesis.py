"""schemathesis over the gateway's OpenAPI description, against real Redis, SeaweedFS and
segments the agent uploaded; and the gateway with its Redis unreachable.

Every operation of the description the app serves is fuzzed twice (bounded, derandomized):

- free: every parameter generated, valid (positive) and invalid (negative) — mostly unknown
  clusters and topics, malformed offsets;
- pinned: valid data with the path pinned to the uploaded partition (and to unknown partitions
  of it), so plans, partition details and timestamp lookups run over real segments.

Checked on every response: no 5xx (with Redis and S3 up, a 5xx is a bug: an unexpected
exception is answered 500 internal_error by the gateway), a documented status code, a
documented content type, a body that conforms to the response schema; invalid input is
rejected with a 4xx.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from fastapi.testclient import TestClient
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.local_url import LOCAL_URL
from tests.support.gateway_env import gateway_client, unique_topic, uploaded_partition
from tests.support.agent_env import registry_for

pytestmark = pytest.mark.integration

EXAMPLES = 30
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
HYPOTHESIS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def fuzz(operation: Any, strategy: Any, checks: list[Any], seen: dict[str, int], failures: list[str], what: str) -> None:
    """Run one bounded, derandomized hypothesis search; record its (shrunk) failure, if any."""

    @given(case=strategy)
    @HYPOTHESIS
    def run(case: Any) -> None:
        response = case.call_and_validate(checks=checks)
        key = f"{operation.label} -> {response.status_code}"
        seen[key] = seen.get(key, 0) + 1

    try:
        run()
    except (Exception, BaseExceptionGroup) as err:  # schemathesis' FailureGroup (with the request to reproduce), or anything else
        failures.append(f"{operation.label} [{what}]: {err}")


def test_every_operation_fuzzed_over_real_data(kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> None:
    topic = unique_topic("fuzzed")  # of its own on the shared broker
    broker, agent = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic, count=600)
    # schemathesis calls the app as Starlette's TestClient does (Host "testserver", server "testserver"):
    # answered on purpose here (http_guards: a name outside allowed_hosts, an address beyond loopback)
    client = gateway_client(agent, s3_server, broker.bootstrap_servers, allowed_hosts=["testserver"], auth={"allow_anonymous": True})
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    entries = registry_for(agent).segments(topic, 0)
    assert entries, "nothing uploaded"
    # values inside (and just around) the uploaded data, which free generation almost never hits
    near_data = {
        "offset": st.integers(0, entries[-1].last_offset + 20),
        "max_bytes": st.integers(1, 300_000),
        "timestamp": st.integers(entries[0].min_timestamp - 1000, entries[-1].max_timestamp + 1000),
    }
    seen: dict[str, int] = {}
    failures: list[str] = []
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        fuzz(operation, operation.as_strategy(GenerationMode.POSITIVE), CHECKS, seen, failures, "valid")
        parameters = list(operation.iter_parameters())
        if parameters:  # nothing to make invalid otherwise
            fuzz(operation, operation.as_strategy(GenerationMode.NEGATIVE), [*CHECKS, negative_data_rejection], seen, failures, "invalid")
        names = {p.name for p in parameters if p.location == "path"}
        if {"cluster", "topic", "partition"} <= names:
            for partition in (0, 1):  # the uploaded partition, and one with no data
                pinned = operation.as_strategy(GenerationMode.POSITIVE, path_parameters={"cluster": agent.cluster, "topic": topic, "partition": partition})
                fuzz(operation, pinned, CHECKS, seen, failures, f"valid, partition {partition} of the uploaded topic")
            query = {p.name for p in parameters if p.location == "query"} & set(near_data)
            if query:
                pinned = operation.as_strategy(GenerationMode.POSITIVE, path_parameters={"cluster": agent.cluster, "topic": topic, "partition": 0})
                fuzz(operation, in_range(pinned, {n: near_data[n] for n in query}), CHECKS, seen, failures, f"valid, {sorted(query)} near the uploaded data")
        elif "cluster" in names:
            pinned = operation.as_strategy(GenerationMode.POSITIVE, path_parameters={"cluster": agent.cluster})
            fuzz(operation, pinned, CHECKS, seen, failures, "valid, the served cluster")
    elapsed = time.monotonic() - started
    print(f"schemathesis: {sum(seen.values())} calls in {elapsed:.1f} s", *sorted(f"  {k}: {v}" for k, v in seen.items()), sep="\n")
    assert not failures, "\n\n".join(failures)
    plan_ok = [k for k in seen if "/plan" in k and k.endswith("-> 200")]
    assert plan_ok, f"no successful plan was generated: {sorted(seen)}"


def in_range(strategy: Any, query: dict[str, Any]) -> Any:
    """The cases of ``strategy`` with some query parameters drawn from the given strategies."""

    def override(args: tuple[Any, dict[str, Any]]) -> Any:
        case, values = args
        case.query = {**(case.query or {}), **values}
        return case

    return st.tuples(strategy, st.fixed_dictionaries(query)).map(override)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the socket is, and nothing listens there


def test_unreachable_redis_is_a_503_registry_unavailable_not_a_500_nor_a_hang(tmp_path, redis_server, s3_server, s3_bucket) -> None:
    class Agent:  # the fields gateway_client reads from agent settings
        cluster = "unreachable"

        class redis:
            url = f"redis://127.0.0.1:{closed_port()}/0"

        class s3:
            bucket, prefix, entropy_bits = s3_bucket, "tiered", 3

    # the app's answer to an escaped exception is checked, rather than the exception re-raised in the test
    client = TestClient(gateway_client(Agent, s3_server, timeouts={"redis_s": 0.5, "s3_s": 2}).app, raise_server_exceptions=False, base_url=LOCAL_URL)  # type: ignore[arg-type]
    base = "/v1/clusters/unreachable/topics/t/partitions/0"
    urls = [f"{base}/plan?offset=0", base, f"{base}/offsets?timestamp=0", "/v1/clusters/unreachable/topics"]
    urls += [f"{base}/records?offset=0&mode={mode}" for mode in ("REMOTE_ONLY", "REMOTE_PREFERRED")]
    wrong = []
    for url in urls:
        started = time.monotonic()
        response = client.get(url)
        elapsed = time.monotonic() - started
        assert elapsed < 5, f"{url} took {elapsed:.1f} s"
        if (response.status_code, response.headers.get("content-type")) != (503, "application/json") or response.json()["error"]["code"] != "registry_unavailable":
            wrong.append(f"{url}: {response.status_code} {response.text}")
    assert not wrong, "\n".join(wrong)
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["clusters"]["unreachable"]["redis"].startswith("unavailable")
    assert client.get("/healthz").status_code == 200
