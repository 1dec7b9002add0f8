"""``tiered-kafka-gateway --workers 2``: Prometheus metrics in multiprocess mode (issue 17).

A real gateway process with two uvicorn workers serves N plan requests on fresh connections (the
kernel hands them to either worker); every scrape of ``/metrics`` then reports the whole server
whichever worker answers it: the plan count is N, the presigned URLs are those the N answers
carried, cache capacities are the sum over the two live workers (``livesum``) and the hit ratio is
that of the summed counters. A SIGKILLed worker's counts stay and its live gauges go. On shutdown
the launcher removes the multiprocess directory it created.
"""

from __future__ import annotations

import concurrent.futures
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.agent_env import registry_for
from tests.support.gateway_env import gateway_settings, unique_topic, uploaded_partition
from tests.support.gateway_process import GatewayProcess

pytestmark = pytest.mark.integration

PLAN = "/v1/clusters/{cluster}/topics/{topic}/partitions/{partition}/plan"
INDEX_BYTES = 1 << 20


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name -> labels -> value, from one scrape on a fresh connection."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def plans_served(samples: dict[str, Any]) -> float:
    return sum(v for labels, v in samples.get("tiered_kafka_gateway_request_seconds_count", {}).items() if dict(labels)["route"] == PLAN)


def workers_of(gateway: GatewayProcess) -> list[int]:
    """uvicorn's worker processes (spawned children; not multiprocessing's resource tracker)."""
    return [pid for pid in gateway.children() if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def multiproc_dir_of(pid: int) -> Path:
    environ = dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item)
    return Path(environ[b"PROMETHEUS_MULTIPROC_DIR"].decode())


def test_two_workers_report_the_whole_server_whichever_answers(kafka_server: Any, tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    topic = unique_topic("metered")
    broker, agent = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic)
    settings = gateway_settings(agent, s3_server, broker.bootstrap_servers, cache={"index_bytes": INDEX_BYTES})
    info = registry_for(agent).partition_info(topic, 0)
    assert info is not None
    gateway = GatewayProcess(settings, workers=2)
    try:
        gateway.wait_ready()
        workers = workers_of(gateway)
        assert len(workers) == 2, workers
        directory = multiproc_dir_of(workers[0])
        assert directory.is_dir() and multiproc_dir_of(workers[1]) == directory
        plan = f"{gateway.url}{PLAN.format(cluster=agent.cluster, topic=topic, partition=0)}"

        def one(offset: int) -> int:  # a fresh connection each: either worker may accept it
            answer = httpx.get(plan, params={"offset": offset, "max_bytes": 4096}, timeout=30)
            assert answer.status_code == 200, answer.text
            return len(answer.json()["ranges"])

        rng = random.Random(17)
        sent = ranges = 0
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            for _ in range(10):  # until both workers have served plans (their counter files exist)
                ranges += sum(pool.map(one, [rng.randint(info.earliest_offset, info.latest_offset) for _ in range(40)]))
                sent += 40
                if all((directory / f"counter_{pid}.db").exists() for pid in workers):
                    break
        assert all((directory / f"counter_{pid}.db").exists() for pid in workers), "one worker served every request"

        deadline = time.monotonic() + 15  # each worker records a request right after answering it
        while plans_served(scrape(gateway.url)) != sent:
            assert time.monotonic() < deadline, (plans_served(scrape(gateway.url)), sent)
            time.sleep(0.1)
        for _ in range(20):  # fresh connections: both workers answer some of these
            samples = scrape(gateway.url)
            assert plans_served(samples) == sent
            assert sum(samples["tiered_kafka_gateway_presigned_urls_total"].values()) == ranges
            index = (("cache", "index"), ("cluster", agent.cluster))
            assert samples["tiered_kafka_gateway_cache_capacity_bytes"][index] == 2 * INDEX_BYTES  # livesum over 2 workers
            lookups = 0.0
            for cache, ratio in samples["tiered_kafka_gateway_cache_hit_ratio"].items():  # the ratio of the summed counters
                hits, misses = samples["tiered_kafka_gateway_cache_hits_total"][cache], samples["tiered_kafka_gateway_cache_misses_total"][cache]
                lookups += hits + misses
                assert ratio == (pytest.approx(hits / (hits + misses)) if hits + misses else 0.0), cache
            assert lookups >= sent
            assert not any(name.endswith("_created") for name in samples)  # multiprocess mode: no per-process creation times

        # a killed worker: its counts stay, its live gauges are dropped at the next scrape
        victim = workers[0]
        import os
        import signal

        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while True:
            samples = scrape(gateway.url)  # answered by the survivor, or by a worker uvicorn started anew
            if not (directory / f"gauge_livesum_{victim}.db").exists():
                break
            assert time.monotonic() < deadline, "the dead worker's live gauges were not dropped"
            time.sleep(0.1)
        assert plans_served(samples) == sent
        assert sum(samples["tiered_kafka_gateway_presigned_urls_total"].values()) == ranges
        assert samples["tiered_kafka_gateway_cache_capacity_bytes"][index] in (INDEX_BYTES, 2 * INDEX_BYTES)
    finally:
        code = gateway.stop()
    assert code == 0, gateway
    assert not directory.exists(), "the launcher left its multiprocess directory behind"
