"""The registry's layout as pure logic: key names and hash tags, member encoding, field encoding (no Redis)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
import redis.exceptions
from redis.crc import key_slot

from tiered_kafka.errors import ConfigError, TieredKafkaError
from tiered_kafka.registry import (
    MAX_OFFSET,
    OPTIONAL_SEGMENT_FIELDS,
    SEGMENT_FIELDS,
    CoverageStart,
    Gap,
    MalformedRegistryDataError,
    PartitionInfo,
    RegistryConflictError,
    RegistryError,
    RegistryUnavailableError,
    RegistryValueError,
    SegmentEntry,
    SegmentOverlapError,
    cluster_partitions_key,
    gap_member,
    hash_tag,
    parse_gap_member,
    parse_segment_member,
    partition_keys,
    segment_member,
)
from tiered_kafka.registry._client import _translated
from tiered_kafka.registry._entries import _parse_gap
from tiered_kafka.registry._scripts import _CLEAR_LUA, _COVERAGE_START_LUA, _DELETE_LUA, _GAP_LUA, _RAISE_LUA, _REGISTER_LUA


def entry(base: int = 100, last: int = 199, **overrides: object) -> SegmentEntry:
    fields: dict[str, object] = {
        "topic": "orders",
        "partition": 3,
        "base_offset": base,
        "last_offset": last,
        "object_key": f"prefix/01011/kafkaCluster1/orders-3/{base:020d}.log",
        "size": 4096,
        "record_count": last - base + 1,
        "min_timestamp": 1_700_000_000_000,
        "max_timestamp": 1_700_000_000_999,
        "checksum": "crc32c:1a2b3c4d",
        "leader_epoch": 7,
        "upload_time_ms": 1_700_000_100_000,
        "files": ("log", "index", "timeindex", "snapshot"),
    }
    fields.update(overrides)
    return SegmentEntry(**fields)  # type: ignore[arg-type]


# -- keys ------------------------------------------------------------------------------------------


def test_partition_key_names() -> None:
    keys = partition_keys("kafkaCluster1", "orders", 3)
    assert keys.tag == "kafkaCluster1/orders-3"
    assert keys.prefix == "tk:{kafkaCluster1/orders-3}:"
    assert keys.segments == "tk:{kafkaCluster1/orders-3}:segments"
    assert keys.segment(100) == "tk:{kafkaCluster1/orders-3}:segment:00000000000000000100"
    assert keys.info == "tk:{kafkaCluster1/orders-3}:info"
    assert keys.gaps == "tk:{kafkaCluster1/orders-3}:gaps"
    assert keys.gap_details == "tk:{kafkaCluster1/orders-3}:gap-details"
    assert keys.coverage == "tk:{kafkaCluster1/orders-3}:coverage"
    assert cluster_partitions_key("kafkaCluster1") == "tk:{kafkaCluster1}:partitions"
    assert partition_keys("c", "t", 0, namespace="x:y").info == "x:y:{c/t-0}:info"


def test_all_keys_of_a_partition_share_one_hash_tag_and_slot() -> None:
    keys = partition_keys("kafkaCluster1", "my.topic_name-x", 12)
    names = [keys.segments, keys.info, keys.gaps, keys.gap_details, keys.coverage, keys.segment(0), keys.segment(MAX_OFFSET)]
    assert {hash_tag(k) for k in names} == {"kafkaCluster1/my.topic_name-x-12"}
    assert len({key_slot(k.encode()) for k in names}) == 1
    # the tag is exactly what Redis Cluster hashes
    assert key_slot(keys.info.encode()) == key_slot(b"kafkaCluster1/my.topic_name-x-12")
    # the cluster set has its own tag, apart from every partition's
    assert hash_tag(cluster_partitions_key("kafkaCluster1")) == "kafkaCluster1"


def test_partitions_get_different_tags() -> None:
    tags = {partition_keys("c", topic, p).tag for topic in ("a", "b", "a-1") for p in range(4)}
    assert len(tags) == 12
    slots = {key_slot(partition_keys("c", "orders", p).info.encode()) for p in range(64)}
    assert len(slots) > 32  # spread over the cluster's slots


@pytest.mark.parametrize(
    ("key", "tag"),
    [("a{b}c", "b"), ("{}x", "{}x"), ("a{b", "a{b"), ("a}b{c}", "c"), ("x{y}{z}", "y"), ("plain", "plain")],
)
def test_hash_tag_follows_redis_cluster_rules(key: str, tag: str) -> None:
    assert hash_tag(key) == tag
    assert key_slot(key.encode()) == key_slot(tag.encode())


@pytest.mark.parametrize("cluster", ["", "a/b", "a{b", "a}b"])
def test_bad_cluster_names(cluster: str) -> None:
    with pytest.raises(ConfigError):
        partition_keys(cluster, "t", 0)
    with pytest.raises(ConfigError):
        cluster_partitions_key(cluster)


@pytest.mark.parametrize(("topic", "partition"), [("", 0), ("a{b}", 0), ("a b", 0), ("t", -1), ("x" * 250, 0), ("t", True)])
def test_bad_topics_and_partitions(topic: str, partition: int) -> None:
    with pytest.raises(RegistryValueError):
        partition_keys("c", topic, partition)


def test_segment_key_refuses_bad_offsets() -> None:
    keys = partition_keys("c", "t", 0)
    for bad in (-1, MAX_OFFSET + 1):
        with pytest.raises(RegistryValueError):
            keys.segment(bad)


# -- members ---------------------------------------------------------------------------------------


def test_segment_member_encoding() -> None:
    assert segment_member(100, 199) == "00000000000000000100:00000000000000000199"
    assert parse_segment_member(b"00000000000000000100:00000000000000000199") == (100, 199)
    assert parse_segment_member(segment_member(0, MAX_OFFSET)) == (0, MAX_OFFSET)
    assert gap_member(5, 9) == "00000000000000000005:00000000000000000009"
    assert parse_gap_member(gap_member(5, 9)) == (5, 9)


def test_members_sort_as_strings_like_their_numbers() -> None:
    pairs = [(0, 9), (10, 99), (100, 999), (1000, 10**12), (10**12 + 1, MAX_OFFSET)]
    members = [segment_member(b, last) for b, last in pairs]
    assert sorted(members) == members
    assert sorted(members, key=lambda m: parse_segment_member(m)[0]) == members


@pytest.mark.parametrize(
    "member",
    ["100:199", "00000000000000000100-00000000000000000199", "00000000000000000200:00000000000000000199", "x", "0000000000000000010a:00000000000000000199",
     "00000000000000000100:00000000000000000199\n"],
)  # fmt: skip
def test_malformed_members(member: str) -> None:
    with pytest.raises(MalformedRegistryDataError, match="tk:k"):
        parse_segment_member(member, key="tk:k")
    with pytest.raises(MalformedRegistryDataError, match="gap member"):
        parse_gap_member(member)


# -- segment fields --------------------------------------------------------------------------------


def test_to_fields_layout() -> None:
    fields = entry(aborted_txns=2, control_records=5, open_txn_first_offset=150, sparse_index=b"\x01\xff").to_fields()
    assert tuple(fields) == SEGMENT_FIELDS
    assert fields == {
        "object_key": "prefix/01011/kafkaCluster1/orders-3/00000000000000000100.log",
        "base_offset": "100",
        "last_offset": "199",
        "size": "4096",
        "record_count": "100",
        "min_timestamp": "1700000000000",
        "max_timestamp": "1700000000999",
        "checksum": "crc32c:1a2b3c4d",
        "leader_epoch": "7",
        "upload_time_ms": "1700000100000",
        "files": "log,index,timeindex,snapshot",
        "aborted_txns": "2",
        "control_records": "5",
        "open_txn_first_offset": "150",
        "sparse_index": "Af8=",
        "min_timestamp_exact": "0",
        "first_offset": "100",
        "range_records": "-1",
        "range_control_records": "-1",
    }
    assert all(isinstance(v, str) for v in fields.values())
    assert entry().member == "00000000000000000100:00000000000000000199"


def test_first_offset_defaults_to_the_base_and_keys_the_registered_range() -> None:
    whole = entry()
    assert whole.first_offset == 100 and whole.first == 100
    straddling = entry(first_offset=150)
    assert straddling.member == "00000000000000000150:00000000000000000199"
    assert not straddling.contains(149) and straddling.contains(150) and straddling.contains(199)
    assert straddling.to_fields()["first_offset"] == "150" and straddling.to_dict()["first_offset"] == 150
    assert SegmentEntry.from_fields("orders", 3, straddling.to_fields()) == straddling
    assert not straddling.same_segment(whole)
    fields = whole.to_fields()
    del fields["first_offset"]  # an entry registered before the field: registered whole
    assert SegmentEntry.from_fields("orders", 3, fields) == whole
    for bad in (99, 200, -1, True):
        with pytest.raises(RegistryValueError, match="first_offset"):
            entry(first_offset=bad)


def test_the_registered_ranges_counts() -> None:
    """A segment registered whole counts its records; one registered from a later offset counts
    the batches from there (``range_records``), unknown (-1) when the entry does not say."""
    whole = entry(control_records=5)
    assert (whole.records_in_range, whole.control_records_in_range) == (100, 5)
    straddling = entry(first_offset=150, control_records=5, range_records=50, range_control_records=1)
    assert (straddling.records_in_range, straddling.control_records_in_range) == (50, 1)
    assert SegmentEntry.from_fields("orders", 3, straddling.to_fields()) == straddling
    fields = straddling.to_fields()
    del fields["range_records"], fields["range_control_records"]  # registered before the fields
    assert SegmentEntry.from_fields("orders", 3, fields).records_in_range == -1
    with pytest.raises(RegistryValueError, match="range_records"):
        entry(range_records=-2)
    with pytest.raises(MalformedRegistryDataError, match="first_offset"):
        SegmentEntry.from_fields("orders", 3, {**whole.to_fields(), "first_offset": "99"}, key="K")


def test_open_txn_first_offset_unknown_when_absent_and_checked() -> None:
    fields = entry(open_txn_first_offset=-1).to_fields()
    assert SegmentEntry.from_fields("orders", 3, fields).open_txn_first_offset == -1
    del fields["open_txn_first_offset"]  # an entry registered before the field
    assert SegmentEntry.from_fields("orders", 3, fields).open_txn_first_offset == -2
    for bad in (-3, 200, True):
        with pytest.raises(RegistryValueError, match="open_txn_first_offset"):
            entry(open_txn_first_offset=bad)


def test_sparse_index_round_trips_as_base64_and_is_none_when_absent() -> None:
    blob = bytes(range(256))
    fields = entry(sparse_index=blob).to_fields()
    assert SegmentEntry.from_fields("orders", 3, fields).sparse_index == blob
    assert SegmentEntry.from_fields("orders", 3, {k.encode(): v.encode() for k, v in fields.items()}).sparse_index == blob
    assert entry().to_fields()["sparse_index"] == ""
    assert SegmentEntry.from_fields("orders", 3, entry().to_fields()).sparse_index is None
    del fields["sparse_index"]  # an entry registered before the field
    assert SegmentEntry.from_fields("orders", 3, fields).sparse_index is None
    assert SegmentEntry.from_fields("orders", 3, {**fields, "sparse_index": "no!"}, key="K").sparse_index is None  # optional: degrades
    for bad in (b"", "text", 5):
        with pytest.raises(RegistryValueError, match="sparse_index"):
            entry(sparse_index=bad)


def test_from_fields_round_trip_with_str_and_bytes() -> None:
    original = entry(min_timestamp=-1, max_timestamp=-1, leader_epoch=-1)
    fields = original.to_fields()
    assert SegmentEntry.from_fields("orders", 3, fields) == original
    as_bytes = {k.encode(): v.encode() for k, v in fields.items()}
    assert SegmentEntry.from_fields("orders", 3, as_bytes) == original
    mixed = {**fields, "base_offset": b"100", "future_field": "ignored"}
    assert SegmentEntry.from_fields("orders", 3, mixed) == original


def test_files_are_normalised() -> None:
    from tiered_kafka.format.segment_names import FileKind

    e = entry(files=[FileKind.SNAPSHOT, "timeindex", FileKind.LOG, "index", "log"])
    assert e.files == ("log", "index", "timeindex", "snapshot")
    assert type(e.files[0]) is str
    assert entry(files=("log",)).to_fields()["files"] == "log"


def test_entries_registered_before_the_transaction_fields_read_them_as_unknown() -> None:
    fields = entry(aborted_txns=3, control_records=4).to_fields()
    assert SegmentEntry.from_fields("orders", 3, fields) == entry(aborted_txns=3, control_records=4)
    del fields["aborted_txns"], fields["control_records"]
    old = SegmentEntry.from_fields("orders", 3, fields)
    assert (old.aborted_txns, old.control_records) == (-1, -1)
    assert entry().to_dict()["aborted_txns"] == -1
    for name in OPTIONAL_SEGMENT_FIELDS:
        with pytest.raises(RegistryValueError, match=name):
            entry(**{name: -3})
        if name == "sparse_index":  # derived: text that is not base64 reads as None (registry/_entries.py)
            assert SegmentEntry.from_fields("orders", 3, {**entry().to_fields(), name: "x"}).sparse_index is None
            continue
        with pytest.raises(MalformedRegistryDataError, match=name):
            SegmentEntry.from_fields("orders", 3, {**entry().to_fields(), name: "x"})


def test_coverage_start_checks_its_values() -> None:
    start = CoverageStart(100, 1_700_000_000_000)
    assert CoverageStart.from_dict(start.to_dict()) == start
    assert dataclasses.is_dataclass(start) and hash(start) == hash(CoverageStart(100, 1_700_000_000_000))
    with pytest.raises(RegistryValueError, match="coverage start offset"):
        CoverageStart(-1, 0)
    with pytest.raises(RegistryValueError, match="observed_ms"):
        CoverageStart(0, -5)
    with pytest.raises(MalformedRegistryDataError, match="s3://b/k"):
        CoverageStart.from_dict({"offset": "1"}, where="s3://b/k")


@pytest.mark.parametrize("missing", [f for f in SEGMENT_FIELDS if f not in OPTIONAL_SEGMENT_FIELDS])
def test_from_fields_names_a_missing_field(missing: str) -> None:
    fields = entry().to_fields()
    del fields[missing]
    with pytest.raises(MalformedRegistryDataError) as caught:
        SegmentEntry.from_fields("orders", 3, fields, key="tk:{c/orders-3}:segment:00000000000000000100")
    assert caught.value.field == missing
    assert caught.value.key == "tk:{c/orders-3}:segment:00000000000000000100"
    assert missing in str(caught.value) and "tk:{c/orders-3}:segment:00000000000000000100" in str(caught.value)
    assert isinstance(caught.value, RegistryError)


@pytest.mark.parametrize(
    ("name", "value"),
    [("size", "12.5"), ("base_offset", ""), ("last_offset", "1e3"), ("record_count", " 3"), ("leader_epoch", "seven"), ("upload_time_ms", "1\n")],
)
def test_from_fields_names_a_malformed_integer(name: str, value: str) -> None:
    fields = {**entry().to_fields(), name: value}
    with pytest.raises(MalformedRegistryDataError, match=name) as caught:
        SegmentEntry.from_fields("orders", 3, fields, key="K")
    assert caught.value.field == name and caught.value.key == "K"


@pytest.mark.parametrize(
    ("name", "value"),
    [("last_offset", "99"), ("files", "index,timeindex"), ("files", ""), ("files", "log,bogus"), ("checksum", "nocolon"), ("object_key", ""), ("size", "-1")],
)
def test_from_fields_rejects_inconsistent_values(name: str, value: str) -> None:
    fields = {**entry().to_fields(), name: value}
    with pytest.raises(MalformedRegistryDataError, match="'K'"):
        SegmentEntry.from_fields("orders", 3, fields, key="K")


def test_from_fields_rejects_non_utf8() -> None:
    fields: dict[bytes, bytes] = {k.encode(): v.encode() for k, v in entry().to_fields().items()}
    fields[b"checksum"] = b"crc32c:\xff\xfe"
    with pytest.raises(MalformedRegistryDataError, match="UTF-8"):
        SegmentEntry.from_fields("orders", 3, fields, key="K")


@pytest.mark.parametrize(
    "overrides",
    [
        {"base_offset": -1},
        {"last_offset": 99},
        {"base_offset": MAX_OFFSET + 1, "last_offset": MAX_OFFSET + 2},
        {"size": -1},
        {"record_count": True},
        {"min_timestamp": -2},
        {"leader_epoch": "7"},
        {"checksum": "1a2b3c4d"},
        {"checksum": "crc32c:"},
        {"object_key": ""},
        {"object_key": "a\nb"},
        {"files": ("index",)},
        {"files": ("log", "deleted")},
        {"topic": "bad topic"},
        {"partition": -1},
    ],
)
def test_entry_validation(overrides: dict[str, object]) -> None:
    with pytest.raises(RegistryValueError):
        entry(**overrides)  # type: ignore[arg-type]


def test_entry_is_frozen_and_hashable() -> None:
    e = entry()
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.size = 1  # type: ignore[misc]
    assert len({e, entry()}) == 1
    assert e.contains(100) and e.contains(199) and not e.contains(200) and e.next_offset == 200
    assert e.same_segment(entry(upload_time_ms=1, leader_epoch=9))
    assert not e.same_segment(entry(checksum="crc32c:ffffffff"))
    assert e.to_dict()["files"] == ["log", "index", "timeindex", "snapshot"]


# -- partition info and gaps -----------------------------------------------------------------------


def test_partition_info_fields() -> None:
    raw = {b"earliest_offset": b"-1", b"latest_offset": b"-1", b"segment_count": b"0", b"total_bytes": b"0", b"updated_ms": b"5"}
    info = PartitionInfo.from_fields(raw)
    assert info == PartitionInfo(-1, -1, 0, 0, 5) and info.is_empty
    assert info.to_dict(include_updated_ms=False) == {"earliest_offset": -1, "latest_offset": -1, "segment_count": 0, "total_bytes": 0}
    with pytest.raises(MalformedRegistryDataError, match="total_bytes") as caught:
        PartitionInfo.from_fields({k: v for k, v in raw.items() if k != b"total_bytes"}, key="I")
    assert caught.value.key == "I"


def test_gap_details_encoding() -> None:
    gap = _parse_gap(gap_member(10, 19), '{"detected_ms":5,"reason":"deleted before upload: x"}', "D")
    assert gap == Gap(10, 19, "deleted before upload: x", 5)
    assert gap.contains(10) and gap.contains(19) and not gap.contains(20)
    for bad in ("not json", '{"reason": "x"}', '{"reason": 1, "detected_ms": 2}', "[]"):
        with pytest.raises(MalformedRegistryDataError, match="'D'"):
            _parse_gap(gap_member(10, 19), bad, "D")


# -- exceptions ------------------------------------------------------------------------------------


def test_exception_tree_and_context() -> None:
    for cls in (RegistryUnavailableError, RegistryValueError, MalformedRegistryDataError, SegmentOverlapError, RegistryConflictError):
        assert issubclass(cls, RegistryError)
    assert issubclass(RegistryError, TieredKafkaError)
    assert RegistryUnavailableError.retriable and not RegistryError.retriable
    assert issubclass(RegistryUnavailableError, ConnectionError)  # generic retry loops recognise it
    assert issubclass(RegistryValueError, ValueError)

    overlap = SegmentOverlapError("orders", 3, (150, 250), (200, 299))
    assert (overlap.topic, overlap.partition, overlap.new_range, overlap.conflicting_range) == ("orders", 3, (150, 250), (200, 299))
    assert "150..250" in str(overlap) and "200..299" in str(overlap) and "orders-3" in str(overlap)

    old, new = entry(), entry(checksum="crc32c:ffffffff", size=1)
    conflict = RegistryConflictError(new, old, (100, 199))
    assert conflict.existing is old and conflict.new is new and conflict.existing_range == (100, 199)
    assert "checksum" in str(conflict) and "size" in str(conflict) and "last_offset" not in str(conflict)
    assert "100..199" in str(RegistryConflictError(new, None, (100, 199)))


def test_redis_errors_are_translated() -> None:
    for err in (redis.exceptions.ConnectionError("down"), redis.exceptions.TimeoutError("slow"), redis.exceptions.BusyLoadingError("loading"),
                redis.exceptions.ClusterDownError("down"), redis.exceptions.TryAgainError("again")):  # fmt: skip
        with pytest.raises(RegistryUnavailableError, match="register x") as caught, _translated("register x"):
            raise err
        assert caught.value.__cause__ is err and caught.value.retriable
    with pytest.raises(RegistryError) as caught, _translated("find"):
        raise redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    assert not isinstance(caught.value, RegistryUnavailableError)
    with pytest.raises(KeyError), _translated("find"):  # not Redis's: left alone
        raise KeyError("x")


# -- scripts and packaging -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "script", [_REGISTER_LUA, _DELETE_LUA, _GAP_LUA, _CLEAR_LUA, _COVERAGE_START_LUA, _RAISE_LUA], ids=lambda s: s.strip()[:30]
)
def test_scripts_only_touch_keys_declared_in_KEYS(script: str) -> None:
    """Every key a script names comes from KEYS (no key is built from a string inside Lua).

    A local function's parameter used as a key counts when every call passes a key there."""
    key_vars = {"KEYS[i]"} | set(re.findall(r"KEYS\[\d\]", script))
    for names, values in re.findall(r"local ((?:\w+, )*\w+) = ((?:KEYS\[\d\], )*KEYS\[\d\])\n", script):
        assert len(names.split(", ")) == len(values.split(", "))
        key_vars |= set(names.split(", "))
    functions = dict(re.findall(r"local function (\w+)\(([^)]*)\)", script))
    for name, params in functions.items():
        calls = re.findall(rf"(?<!function ){name}\(([^)]*)\)", script)
        for position, param in enumerate(params.split(", ")):
            if re.search(rf"redis\.call\('\w+', {param}[,)]", script):
                assert calls and all(c.split(", ")[position] in key_vars for c in calls), (name, param)
                key_vars.add(param)
    calls = re.findall(r"redis\.call\('(\w+)', ([^,)]+)", script)
    assert calls
    for command, key in calls:
        assert key in key_vars, (command, key)
    assert "redis.pcall" not in script and "EVAL" not in script


def test_importing_the_registry_does_not_import_redis() -> None:
    code = "import sys, tiered_kafka.registry; print('redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
