"""The compiled decoders against the Python reference on corrupted batches.

Valid batches are mutated at random (bytes flipped, varints lengthened, header fields set to edge
values), their CRC-32C recomputed so that the record checks are reached, and every decoder run:
the columnar one, the per-record one, and the consumer's index (``_native.index_batches``). All must
either raise the same error type with the same message or return equal results (``default_record``'s
docstring states the checks). Seeded: a failure names its seed.
"""

from __future__ import annotations

import random
import struct

import crc32c
import pytest

from tests.support.batches import Rec, build_control, build_v2, sample_records
from tiered_kafka.errors import TieredKafkaError
from tiered_kafka.format import record_batch
from tiered_kafka.format.columnar import decode_columnar
from tiered_kafka.format.record_batch import Codec, ControlRecordType, decompress, iter_batches


CASES = 3000

_BASES = [
    build_v2(sample_records(4, value_size=6)),
    build_v2([Rec(None, b"v", 1_700_000_000_000, [("k", b"x"), ("h", None)]), Rec(b"k", None, 1_700_000_000_005)],
             base_offset=10),  # fmt: skip
    build_v2(sample_records(3, value_size=3), codec=Codec.SNAPPY, base_offset=7),
    build_control(ControlRecordType.COMMIT, base_offset=20),
]
_EDGES = [0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE, 0x81]
#: header fields worth setting to edge values: (offset, struct format)
_FIELDS = [(0, ">q"), (23, ">i"), (27, ">q"), (35, ">q"), (57, ">i")]
_FIELD_VALUES = [-1, 0, 1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 2**63 - 3, 2**62]


def _mutate(rnd: random.Random) -> bytes:
    data = bytearray(rnd.choice(_BASES))
    for _ in range(rnd.randint(1, 4)):
        kind = rnd.random()
        if kind < 0.55:  # a byte of the records
            data[rnd.randrange(61, len(data))] = rnd.choice(_EDGES + [rnd.randrange(256)])
        elif kind < 0.7:  # a varint made longer or its continuation bit flipped
            i = rnd.randrange(61, len(data))
            data[i] ^= 0x80
        elif kind < 0.9:  # a header field at an edge value
            offset, fmt = rnd.choice(_FIELDS)
            size = struct.calcsize(fmt)
            value = rnd.choice(_FIELD_VALUES)
            limit = 2 ** (8 * size - 1)
            struct.pack_into(fmt, data, offset, max(-limit, min(limit - 1, value)))
        else:  # the attributes byte (codec, timestamp type, control, transactional bits)
            data[22] = rnd.randrange(256)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def _outcome(fn, data: bytes) -> tuple:  # noqa: ANN001
    try:
        return ("ok", fn(data))
    except (TieredKafkaError, ValueError) as err:
        return (type(err).__name__, str(err))


def _columnar(data: bytes) -> tuple:
    decoded = decode_columnar(data)
    return decoded.records.to_pydict(), decoded.batches.to_pydict()


def _per_record(data: bytes) -> list:
    return [
        (batch.base_offset, batch.last_offset, [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
                                                  [tuple(h) for h in r.headers]) for r in batch])
        for batch in iter_batches(data)
    ]  # fmt: skip


def _index(data: bytes) -> list:
    index, _payloads, _info = record_batch._native.index_batches(data, 0, decompress, 127)
    return record_batch._native.batch_rows(index)


def test_mutated_batches_decode_alike() -> None:
    outcomes = {"ok": 0, "error": 0}
    for seed in range(CASES):
        data = _mutate(random.Random(seed))
        native = _outcome(_columnar, data)
        per_record = _outcome(_per_record, data)
        index = _outcome(_index, data)
        with record_batch.reference_paths():
            reference = _outcome(_columnar, data)
            reference_per_record = _outcome(_per_record, data)
        assert native == reference, f"seed {seed}: columnar"
        assert per_record == reference_per_record, f"seed {seed}: per-record"
        # the consumer's index: the same verdict and error as the columnar decoder
        assert index[0] == native[0] and (index[0] == "ok" or index == native), f"seed {seed}: index"
        outcomes["ok" if native[0] == "ok" else "error"] += 1
    # the mutations reach both outcomes often enough to mean something
    assert outcomes["ok"] > CASES // 20 and outcomes["error"] > CASES // 2, outcomes
