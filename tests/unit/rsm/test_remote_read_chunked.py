"""The SDK's side of a compressed KIP-405 range (``remote_read._fetch_chunked``): the chunks a plan
describes go through ``tiered_kafka.rsm.transform.detransform_range``, so a chunk claiming more than
its original size is refused from its frame header, never decompressed.

The gateway client is a stub answering ``fetch`` with stored bytes (pure logic; the real path is in
tests/integration/rsm)."""

from __future__ import annotations

import os

import pytest

from tiered_kafka.errors import CorruptRecordError
from tiered_kafka.client.gateway import ChunkedRange, PlannedRange
from tiered_kafka.client.remote_read import fetch_range
from tiered_kafka.rsm.transform import transform_chunk

URL = "http://s3.test/bucket/p/t-x/0/00000000000000000000-seg.log?X-Amz-Signature=secret"
CHUNK = 300


class _StoredObject:
    """``GatewayClient.fetch`` of a stored object: the bytes of the asked (wire) range."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.asked: list[tuple[int, int]] = []

    def fetch(self, planned: PlannedRange) -> bytes:
        self.asked.append((planned.start, planned.end))
        return self.data[planned.start : planned.end]


def _planned(stored: list[bytes], first_chunk: int, last_chunk: int, start: int, end: int) -> PlannedRange:
    fetch_start = sum(len(s) for s in stored[:first_chunk])
    sizes = tuple(len(s) for s in stored[first_chunk : last_chunk + 1])
    chunked = ChunkedRange("zstd", fetch_start, fetch_start + sum(sizes), f"bytes={fetch_start}-{fetch_start + sum(sizes) - 1}",
                           sizes, (CHUNK,) * len(sizes), first_chunk * CHUNK)
    return PlannedRange(start, end, 0, 0, URL, f"bytes={start}-{end - 1}", chunked)


def test_a_planned_range_is_sliced_from_its_decompressed_chunks() -> None:
    original = os.urandom(4 * CHUNK)
    stored = [transform_chunk(original[i : i + CHUNK], compression=True, encryption=None) for i in range(0, len(original), CHUNK)]
    client = _StoredObject(b"".join(stored))
    planned = _planned(stored, 1, 2, 350, 880)
    assert fetch_range(client, "t", 0, planned) == original[350:880]  # type: ignore[arg-type]
    assert client.asked == [(len(stored[0]), len(stored[0]) + len(stored[1]) + len(stored[2]))]


def test_a_chunk_claiming_a_huge_size_is_refused_unread() -> None:
    huge = b"\x28\xb5\x2f\xfd\xa0" + b"\xff\xff\xff\xff" + b"\x01\x00\x00"  # Frame_Content_Size 0xFFFFFFFF
    client = _StoredObject(huge)
    planned = _planned([huge], 0, 0, 0, 100)
    with pytest.raises(CorruptRecordError, match="http://s3.test/bucket/p/t-x/0/00000000000000000000-seg.log chunk 0 .*claims 4294967295 bytes"):
        fetch_range(client, "t", 0, planned)  # type: ignore[arg-type]


def test_chunks_that_do_not_cover_the_range_are_corrupt() -> None:
    original = os.urandom(2 * CHUNK)
    stored = [transform_chunk(original[i : i + CHUNK], compression=True, encryption=None) for i in range(0, len(original), CHUNK)]
    client = _StoredObject(b"".join(stored))
    planned = _planned(stored, 0, 0, 200, 400)  # one chunk (0..300) for bytes 200..400
    with pytest.raises(CorruptRecordError, match="not inside chunks"):
        fetch_range(client, "t", 0, planned)  # type: ignore[arg-type]
    assert "secret" not in str(pytest.raises(CorruptRecordError, fetch_range, client, "t", 0, _planned([b"x" * 10], 0, 0, 0, 10)).value)
