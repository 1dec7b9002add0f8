"""One tiered stack (broker, agent, gateway), one bucket and one SQLite catalog for the Iceberg tests.

Package-scoped: the stack takes ~10 s to start; each test uses its own topic and its own table.
Tables are read back with PyIceberg and compared with what a plain confluent-kafka consumer reads
of the same offsets from the broker (the reference).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.stack_env import TieredStack, own_tiered_stack

Row = tuple[int, int, bytes | None, bytes | None, int, int, list[tuple[str, bytes | None]]]
"""(partition, offset, key, value, timestamp ms, timestamp type, headers)."""


@dataclass
class Lake:
    stack: TieredStack
    catalog_properties: dict[str, str]
    catalog_db: Path
    warehouse: str

    def cli_args(self, topic: str, table: str, *extra: str) -> list[str]:
        """``tiered-kafka export ... --format iceberg`` arguments for ``topic`` into ``table``."""
        args = ["export", "--gateway", self.stack.gateway_url, "--cluster", self.stack.cluster, topic, *extra, "--format", "iceberg", "--table", table]
        for key, value in self.catalog_properties.items():
            args += ["--catalog-property", f"{key}={value}"]
        return args

    def table(self, name: str) -> Any:
        from tiered_kafka.iceberg.catalog import DEFAULT_CATALOG, load

        return load(DEFAULT_CATALOG, self.catalog_properties).load_table(name)


@pytest.fixture(scope="package")
def lake(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[Lake]:
    root = tmp_path_factory.mktemp("iceberg-stack")
    bucket = s3_server.create_bucket(f"lake-{uuid.uuid4().hex[:12]}")
    db = root / "catalog.db"
    props = {
        "type": "sql",
        "uri": f"sqlite:///{db}",
        "warehouse": f"s3://{bucket}/warehouse",
        "s3.endpoint": s3_server.endpoint_url,
        "s3.access-key-id": s3_server.access_key,
        "s3.secret-access-key": s3_server.secret_key,
        "s3.region": "us-east-1",
    }
    with own_tiered_stack(root, redis_server, s3_server, "iceberg") as stack:
        yield Lake(stack, props, db, props["warehouse"])


def kafka_rows(bootstrap: str, topic: str, ends: dict[int, int], starts: dict[int, int] | None = None, isolation: str = "read_committed") -> list[Row]:
    """What a confluent-kafka consumer reads of ``topic`` from ``starts`` (default 0) up to ``ends`` (exclusive) per partition, sorted."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ref-{uuid.uuid4().hex[:6]}", "isolation.level": isolation, "enable.auto.commit": False})
    starts = starts or {}
    try:
        todo = {p: e for p, e in ends.items() if e > starts.get(p, 0)}
        consumer.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in todo])
        rows: list[Row] = []
        deadline = time.monotonic() + 60
        while todo:
            assert time.monotonic() < deadline, f"{topic}: the broker did not deliver up to {todo}"
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                if m.partition() in todo and m.offset() < todo[m.partition()]:
                    kind, ts = m.timestamp()
                    rows.append((m.partition(), m.offset(), m.key(), m.value(), ts, kind - 1 if kind else -1, list(m.headers() or [])))
            for tp in consumer.position([TopicPartition(topic, p) for p in list(todo)]):
                if tp.offset >= todo[tp.partition]:
                    del todo[tp.partition]
        return sorted(rows, key=lambda r: (r[0], r[1]))
    finally:
        consumer.close()


def table_rows(table: Any, topic: str) -> list[Row]:
    """The table's rows of ``topic``, sorted by (partition, offset), as ``Row`` s (PyIceberg scan)."""
    data = table.scan().to_arrow()
    out: list[Row] = []
    for r in data.to_pylist():
        assert r["topic"] == topic
        ts = r["timestamp"]
        out.append((r["partition"], r["offset"], r["key"], r["value"], None if ts is None else round(ts.timestamp() * 1000), r["timestampType"],
                    [(h["key"], h["value"]) for h in r["headers"] or []]))
    return sorted(out, key=lambda r: (r[0], r[1]))
