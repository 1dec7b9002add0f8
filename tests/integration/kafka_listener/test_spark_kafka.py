"""Spark's own Kafka source (spark-sql-kafka, the Java consumer inside Spark) pointed at the listener: a
batch read and a readStream stopped after its first micro-batch then restarted from its checkpoint
deliver every record of the topic from offset 0, once, byte for byte (``tests.support.spark_kafka_job``)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.kafka_listener.conftest import PARTITIONS, PRODUCED, TOPIC, ListenerStack, Rec

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def as_recs(lines: list[dict]) -> dict[int, list[Rec]]:
    unb64 = lambda v: None if v is None else base64.b64decode(v)  # noqa: E731
    by_partition: dict[int, list[tuple[int, Rec]]] = {p: [] for p in range(PARTITIONS)}
    for row in lines:
        pairs = [(h["key"], h.get("value")) if isinstance(h, dict) else h for h in (row.get("headers") or [])]  # the JSON sink writes structs
        headers = tuple((k, unb64(v) or b"") for k, v in pairs)
        by_partition[row["partition"]].append((row["offset"], Rec(unb64(row.get("key")), unb64(row.get("value")), headers, row["ts"])))
    out = {}
    for p, rows in by_partition.items():
        rows.sort(key=lambda r: r[0])
        assert [o for o, _r in rows] == list(range(len(PRODUCED[p]))), f"partition {p}: offsets lost or twice"
        out[p] = [r for _o, r in rows]
    return out


def test_spark_kafka_source_batch_and_restarted_stream(tiered: ListenerStack, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.support.spark_kafka_job", tiered.listener, TOPIC, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    batch = [json.loads(line) for line in (tmp_path / "batch.jsonl").read_text().splitlines()]
    assert as_recs(batch) == PRODUCED
    first_run = int((tmp_path / "first_run_rows").read_text())
    assert 0 < first_run < sum(len(v) for v in PRODUCED.values())  # the restart had work left
    stream = [json.loads(line) for line in (tmp_path / "stream.jsonl").read_text().splitlines()]
    assert as_recs(stream) == PRODUCED
