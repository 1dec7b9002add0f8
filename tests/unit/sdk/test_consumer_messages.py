"""``consumer.messages.range_messages``: the Messages TieredConsumer delivers, equal field for field
(topic, partition, offset, key, value, headers, timestamp) to the per-record reference
(``remote_read.decode_range``'s records), under both implementations (the compiled
``_native.build_messages`` in this process, whole and slice by slice; the columnar reference in a
subprocess with TIERED_KAFKA_PURE_PYTHON=1); batches cut from them as the read_committed rule needs
them; and the same errors as the columnar decoder for bad ranges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE

from tests.support.batches import Rec, build_control, build_legacy, build_v2, sample_records
from tiered_kafka.client.columnar_read import decode_planned
from tiered_kafka.consumer.messages import MessageSlices, range_messages
from tiered_kafka.errors import CorruptRecordError
from tiered_kafka.format.record_batch import ControlRecordType, iter_batches
from tiered_kafka.client.gateway import PlannedRange
from tiered_kafka.client.remote_read import decode_range

ROOT = Path(__file__).resolve().parents[3]


def log_append_time(data: bytes) -> bytes:
    """``data`` (one magic 2 batch) with the LogAppendTime attribute set and its CRC recomputed."""
    import struct

    import crc32c

    out = bytearray(data)
    struct.pack_into(">h", out, 21, struct.unpack_from(">h", out, 21)[0] | 0x08)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def cases() -> dict[str, bytes]:
    """Buffers of whole batches: headers, null keys and values, codecs, control batches, LogAppendTime, magic 0/1."""
    recs = sample_records(40)
    return {
        "plain": build_v2(recs[:20]) + build_v2(recs[20:], base_offset=20),
        "gzip+lz4+zstd": build_v2(recs[:10], codec=1) + build_v2(recs[10:25], codec=3, base_offset=10) + build_v2(recs[25:], codec=4, base_offset=25),
        "transactional+control": build_v2(recs[:5], producer_id=7, transactional=True) + build_control(1, base_offset=5, producer_id=7) + build_v2(recs[5:9], base_offset=6),
        "log_append_time": log_append_time(build_v2(recs[:8])),
        "no_headers_null_keys": build_v2([Rec(None, b"v%d" % i, 1_700_000_000_000 + i) for i in range(30)]),
        "no_timestamp": build_v2([Rec(b"k", b"v", -1), Rec(b"k", None, 1_700_000_000_000)]),
        "magic1": build_legacy(recs[:6], magic=1),
        "magic0": build_legacy(recs[:6], magic=0),
    }


def planned_for(data: bytes) -> PlannedRange:
    batches = list(iter_batches(data))
    return PlannedRange(0, len(data), batches[0].base_offset, batches[-1].last_offset, "http://s3/o", f"bytes=0-{len(data) - 1}")


def reference_rows(data: bytes) -> list[list[Any]]:
    """The per-record path's records as confluent-kafka's Message would show them."""
    types = {0: TIMESTAMP_CREATE_TIME, 1: TIMESTAMP_LOG_APPEND_TIME}
    rows = []
    for batch in decode_range(data, planned_for(data), object_key="k"):
        for r in batch.records:
            ts = r.timestamp
            timestamp = [TIMESTAMP_NOT_AVAILABLE, -1] if ts is None else [types.get(r.timestamp_type, TIMESTAMP_CREATE_TIME), ts]
            rows.append(["t", 3, r.offset, _hex(r.key), _hex(r.value), [[k, _hex(v)] for k, v in r.headers] or None, timestamp])
    return rows


def columnar_rows() -> dict[str, Any]:
    """Every case through ``range_messages`` (its Messages made at once, and slice by slice), as
    JSON-able rows, with the implementation that ran."""
    from tiered_kafka.format.columnar import COLUMNAR_IMPLEMENTATION

    out: dict[str, Any] = {"implementation": COLUMNAR_IMPLEMENTATION}
    for name, data in cases().items():
        loaded, size = range_messages("t", 3, data, planned_for(data), "k")
        assert size >= len(data)
        out[name] = [_row(m) for m in loaded.messages]
        slices, sliced = loaded.slices(), []
        while part := slices.take(3):
            sliced.extend(part)
        out[name + "/sliced"] = [_row(m) for m in sliced]
        out.setdefault("types", {})[name] = type(loaded).__name__
    return out


def _row(m: Any) -> list[Any]:
    return [m.topic(), m.partition(), m.offset(), _hex(m.key()), _hex(m.value()), [[k, _hex(v)] for k, v in m.headers()] if m.headers() else None, list(m.timestamp())]


def _hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


@pytest.mark.parametrize("pure_python", [False, True], ids=["compiled-or-default", "pure-python-subprocess"])
def test_messages_equal_the_per_record_reference(pure_python: bool) -> None:
    if pure_python:
        env = {**os.environ, "TIERED_KAFKA_PURE_PYTHON": "1"}
        code = "import json; from tests.unit.sdk.test_consumer_messages import columnar_rows; print(json.dumps(columnar_rows()))"
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["implementation"] == "python"
    else:
        got = json.loads(json.dumps(columnar_rows()))
        assert got["implementation"] == "c"
        # the compiled path, except for magic 0/1 message sets (the columnar reference)
        assert {name for name, kind in got["types"].items() if kind == "_NativeRange"} == set(cases()) - {"magic0", "magic1"}
    for name, data in cases().items():
        expected = reference_rows(data)
        assert expected, name
        assert got[name] == expected, name
        assert got[name + "/sliced"] == expected, name


def test_batches_slice_the_messages_and_keep_control_batches() -> None:
    data = cases()["transactional+control"]
    loaded, _size = range_messages("t", 0, data, planned_for(data), "k")
    assert not loaded.plain
    batches = loaded.batches()
    assert [(b.base_offset, b.last_offset, b.producer_id, b.transactional, b.control) for b in batches] == [
        (0, 4, 7, True, None),
        (5, 5, 7, True, ControlRecordType.COMMIT),
        (6, 9, -1, False, None),
    ]
    assert [[m.offset() for m in b.records] for b in batches] == [[0, 1, 2, 3, 4], [], [6, 7, 8, 9]]
    assert (loaded.first_offset, loaded.last_offset) == (0, 9)


def test_one_batch_of_a_plain_range_is_its_slices_and_skips_below_an_offset() -> None:
    data = cases()["plain"]
    loaded, _size = range_messages("t", 0, data, planned_for(data), "k")
    assert loaded.plain and loaded.rows == 40
    batch = loaded.as_one_batch()
    assert (batch.base_offset, batch.last_offset, batch.transactional, batch.control) == (0, 39, False, None)
    slices = batch.records
    assert isinstance(slices, MessageSlices) and len(slices) == 40
    slices.skip_below(25)  # the first batch (0..19) is passed without making its Messages
    assert len(slices) == 20
    assert [m.offset() for m in slices] == list(range(20, 40))
    assert len(slices) == 0 and slices.take() == []


def _corrupt_crc(data: bytes) -> bytes:
    out = bytearray(data)
    out[-1] ^= 0xFF
    return bytes(out)


@pytest.mark.parametrize("case", ["plain", "gzip+lz4+zstd"])
def test_bad_ranges_raise_what_the_columnar_decoder_raises(case: str) -> None:
    data = cases()[case]
    planned = planned_for(data)
    with pytest.raises(CorruptRecordError) as compiled:
        range_messages("t", 0, _corrupt_crc(data), planned, "obj/key")
    with pytest.raises(CorruptRecordError) as columnar:
        decode_planned(_corrupt_crc(data), planned, object_key="obj/key")
    assert str(compiled.value) == str(columnar.value) and "obj/key" in str(compiled.value)
    assert compiled.value.position == columnar.value.position
    other = PlannedRange(0, len(data), 1, planned.last_offset, planned.url, planned.range_header)
    with pytest.raises(CorruptRecordError, match="should hold offsets 1..39, holds 0..39"):
        range_messages("t", 0, data, other, "obj/key")
    with pytest.raises(CorruptRecordError, match="TruncatedRecordError|runs past|too few"):
        range_messages("t", 0, data[:-5], PlannedRange(0, len(data) - 5, 0, 39, planned.url, planned.range_header), "obj/key")


def test_header_keys_are_checked_as_strict_utf8_like_the_reference() -> None:
    """The compiled check (without the GIL) agrees with Python's strict decoder."""
    for key_bytes in (b"ok", "é€𝄞".encode(), b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x82"):
        try:
            key_bytes.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        data = _with_header_key(key_bytes)
        if valid:
            loaded, _size = range_messages("t", 0, data, planned_for(data), "k")
            assert loaded.messages[0].headers() == [(key_bytes.decode(), b"v")]
        else:
            with pytest.raises(CorruptRecordError, match="not valid UTF-8"):
                range_messages("t", 0, data, planned_for(data), "k")
            with pytest.raises(CorruptRecordError, match="not valid UTF-8"):
                decode_planned(data, planned_for(data), object_key="k")


def _with_header_key(key: bytes) -> bytes:
    """One batch whose record has a header with ``key`` (built with a placeholder, then patched: the
    builders refuse keys that are not text)."""
    import struct

    import crc32c

    placeholder = b"\x01" * len(key)
    data = bytearray(build_v2([Rec(b"k", b"v", 1_700_000_000_000, [("\x01" * len(key), b"v")])]))
    at = bytes(data).index(placeholder, 61)
    data[at : at + len(key)] = key
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)
