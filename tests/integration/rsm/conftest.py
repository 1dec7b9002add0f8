"""A bucket laid out by Aiven's RemoteStorageManager (``tests/support/rsm_writer.py``) from our real
broker-written fixture segments, one topic per variant, and the gateway serving it as a kip405 cluster.

Variants (topic name -> how its three segments, offsets 0..925 of ``test_topic_a-0``, are stored):
``plain`` byte-identical (fixed chunk index); ``zipped`` zstd per chunk (variable chunk index, as the RSM
writes compressed segments); ``sealed`` AES-256-GCM per chunk with an RSA-wrapped data key (fixed index);
``vault`` both; ``varchunks`` encrypted with a variable chunk index. Chunks are small (4 KiB of
original bytes) so that plans cross many chunk boundaries.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.fixtures import FIXTURES, MANIFEST
from tests.support.rsm_writer import make_rsa_key_pair, write_rsm_segment
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.rsm.keys import RsmSegmentKey, uuid_from_bytes
from tiered_kafka_dev.services._process import free_ports
from tiered_kafka_dev.stack import GatewayServer
from tiered_kafka_gateway.config import load_settings

FIXTURE_PARTITION = "test_topic_a-0"
SEGMENTS = sorted(MANIFEST[FIXTURE_PARTITION])[:3]
PREFIX = "tiered/"
KEY_ID = "key-1"
CHUNK_SIZE = 4096
VARIANTS: dict[str, dict[str, Any]] = {  # variable_chunk_index None: as the RSM does (variable exactly when compressed)
    "plain": {"compression": False, "encryption": False, "variable_chunk_index": None},
    "zipped": {"compression": True, "encryption": False, "variable_chunk_index": None},
    "sealed": {"compression": False, "encryption": True, "variable_chunk_index": None},
    "vault": {"compression": True, "encryption": True, "variable_chunk_index": None},
    "varchunks": {"compression": False, "encryption": True, "variable_chunk_index": True},
}
URL_SECRET = "s" * 40


@dataclass(frozen=True)
class Expected:
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None


def expected_records() -> list[Expected]:
    """Every record of the fixture segments, read from the broker's files with the format core."""
    out = []
    for name in SEGMENTS:
        for batch in iter_batches((FIXTURES / FIXTURE_PARTITION / name).read_bytes()):
            if batch.is_control:
                continue
            out.extend(Expected(r.offset, r.timestamp, r.key, r.value) for r in batch)
    return out


@dataclass
class RsmBucket:
    s3_server: Any
    bucket: str
    topic_ids: dict[str, str]
    keys: dict[str, list[RsmSegmentKey]]  # topic -> its segments' keys, oldest first
    private_pem: bytes
    public_pem: bytes

    def cluster(self, *, key_ring: dict[str, str] | None = None, bootstrap: str | None = None) -> dict[str, Any]:
        s3 = self.s3_server
        return {
            "kind": "kip405",
            "rsm": {
                "bucket": self.bucket, "key_prefix": PREFIX, "endpoint_url": s3.endpoint_url, "region": s3.region,
                "access_key_id": s3.access_key, "secret_access_key": s3.secret_key,
                "key_ring": {KEY_ID: self.private_pem.decode()} if key_ring is None else key_ring,
            },
            "bootstrap_servers": bootstrap,
        }


def upload_topic(s3_server: Any, bucket: str, topic: str, topic_id: str, public_pem: bytes, logs: list[str], **variant: Any) -> list[RsmSegmentKey]:
    client = s3_server.client()
    encryption = (KEY_ID, public_pem) if variant["encryption"] else None
    return [
        write_rsm_segment(
            client, bucket, prefix=PREFIX, topic=topic, topic_id=topic_id, partition=0,
            segment_dir_or_files=FIXTURES / FIXTURE_PARTITION / name, chunk_size=CHUNK_SIZE, compression=variant["compression"],
            encryption_key=encryption, variable_chunk_index=variant["variable_chunk_index"],
        )
        for name in logs
    ]


@pytest.fixture(scope="module")
def key_pair() -> tuple[bytes, bytes]:
    return make_rsa_key_pair()


@pytest.fixture
def rsm_bucket(s3_server: Any, s3_bucket: str, key_pair: tuple[bytes, bytes]) -> RsmBucket:
    private_pem, public_pem = key_pair
    topic_ids = {topic: uuid_from_bytes(secrets.token_bytes(16)) for topic in VARIANTS}
    keys = {topic: upload_topic(s3_server, s3_bucket, topic, topic_ids[topic], public_pem, SEGMENTS, **variant) for topic, variant in VARIANTS.items()}
    return RsmBucket(s3_server, s3_bucket, topic_ids, keys, private_pem, public_pem)


@contextmanager
def rsm_gateway(bucket: RsmBucket, *, gateway_settings: dict[str, Any] | None = None, **cluster: Any) -> Iterator[str]:
    """The gateway on uvicorn serving ``bucket`` as cluster ``rsm`` (``gateway_settings``: more settings); yields its URL."""
    port = free_ports(1)[0]
    settings = load_settings(
        clusters={"rsm": bucket.cluster(**cluster)}, rsm_url_secret=URL_SECRET, public_url=f"http://127.0.0.1:{port}",
        cache={"listing_ttl_s": 0}, **(gateway_settings or {}),
    )
    server = GatewayServer(settings, port)
    try:
        yield server.url
    finally:
        server.stop()


def log_path(name: str) -> Path:
    return FIXTURES / FIXTURE_PARTITION / name
