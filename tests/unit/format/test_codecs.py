"""The decompressed-size bound of one batch (``tiered_kafka.format.codecs``)."""

from __future__ import annotations

import struct
import zlib

import crc32c
import lz4.frame
import pytest
import zstandard
from aiokafka.codec import gzip_encode, lz4_encode, snappy_encode, zstd_encode

from tests.support.batches import Rec, build_v2
from tiered_kafka.errors import CorruptRecordError
from tiered_kafka.format import record_batch
from tiered_kafka.format.codecs import MAX_DECOMPRESSED_BATCH_BYTES, decompress_bounded
from tiered_kafka.format.columnar import decode_columnar
from tiered_kafka.format.record_batch import Codec, iter_batches

PAYLOAD = bytes(range(256)) * 200 + bytes(300_000)  # 351,200 bytes: several lz4/zstd/xerial blocks

ENCODED = {
    "gzip": (Codec.GZIP, gzip_encode(PAYLOAD)),
    "snappy raw": (Codec.SNAPPY, snappy_encode(PAYLOAD, xerial_compatible=False)),
    "snappy xerial": (Codec.SNAPPY, snappy_encode(PAYLOAD, xerial_compatible=True)),
    "lz4 frame": (Codec.LZ4, lz4_encode(PAYLOAD)),
    "lz4 frame, no content size": (Codec.LZ4, lz4.frame.compress(PAYLOAD, store_size=False, block_checksum=True)),
    "lz4 frame, content size": (Codec.LZ4, lz4.frame.compress(PAYLOAD, store_size=True, content_checksum=True)),
    "zstd": (Codec.ZSTD, zstd_encode(PAYLOAD)),
    "zstd, no content size": (Codec.ZSTD, zstandard.ZstdCompressor(write_content_size=False).compress(PAYLOAD)),
}


@pytest.mark.parametrize("name", list(ENCODED))
def test_every_codec_is_bounded(name: str) -> None:
    codec, encoded = ENCODED[name]
    assert decompress_bounded(codec, encoded, limit=len(PAYLOAD) + 4 * 2**20) == PAYLOAD
    with pytest.raises(ValueError, match="above the 1000 bytes a batch may hold"):
        decompress_bounded(codec, encoded, limit=1000)
    assert record_batch.decompress(codec, memoryview(encoded)) == PAYLOAD


def _gzip_bomb(size: int) -> bytes:
    """gzip of size zero bytes, made a MiB at a time (the test never holds the inflated bytes)."""
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = bytes(2**20)
    parts = [packer.compress(chunk) for _ in range(size // 2**20)]
    return b"".join(parts) + packer.flush()


def test_a_gzip_bomb_is_a_corrupt_batch_on_both_paths() -> None:
    batch = bytearray(build_v2([Rec(b"k", b"v", 5)]))
    batch = batch[:61] + _gzip_bomb(MAX_DECOMPRESSED_BATCH_BYTES + 2**20)
    batch[22] |= Codec.GZIP  # attributes' low byte
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    data = bytes(batch)
    for reference in (False, True):
        with record_batch.reference_paths() if reference else _nothing():
            with pytest.raises(CorruptRecordError, match=r"decompression failed.*a batch may hold.*position 0"):
                decode_columnar(data)
            with pytest.raises(CorruptRecordError, match="a batch may hold"):
                [list(b) for b in iter_batches(data)]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
