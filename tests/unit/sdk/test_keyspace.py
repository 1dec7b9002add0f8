"""The object keyspace, with the seed's entropy test vectors (DESIGN.md)."""

from __future__ import annotations

import pytest

from tiered_kafka.errors import ConfigError, InvalidSegmentNameError
from tiered_kafka.format.segment_names import FileKind, SegmentFileName
from tiered_kafka.keyspace import Keyspace, ParsedKey, entropy


@pytest.mark.parametrize(
    ("topic", "partition", "bits"),
    [("topicA", 0, "01011"), ("topicA", 1, "01010"), ("topicB", 0, "11100")],
)
def test_entropy_vectors(topic: str, partition: int, bits: str) -> None:
    assert entropy("kafkaCluster1", topic, partition, 5) == bits


def test_entropy_is_msb_first_md5_prefix() -> None:
    import hashlib

    digest = hashlib.md5(b"c-t-3").digest()
    assert entropy("c", "t", 3, 16) == f"{digest[0]:08b}{digest[1]:08b}"
    assert entropy("c", "t", 3, 0) == ""
    with pytest.raises(ConfigError):
        entropy("c", "t", 3, 129)


def test_seed_example_key() -> None:
    ks = Keyspace(prefix="custom-prefix", cluster="kafkaCluster1", entropy_bits=5)
    assert ks.segment_key("topicA", 0, 100, FileKind.LOG) == "custom-prefix/01011/kafkaCluster1/topicA-0/00000000000000000100.log"
    assert ks.offset_wm_key("topicA", 0) == "custom-prefix/01011/kafkaCluster1/topicA-0/offset.wm"


def test_no_entropy_and_no_prefix() -> None:
    assert Keyspace("p/", "c").segment_key("t", 2, 7, FileKind.TIMEINDEX) == "p/c/t-2/00000000000000000007.timeindex"
    assert Keyspace("", "c").partition_prefix("t", 2) == "c/t-2/"
    assert Keyspace("", "c").cluster_prefixes() == ["c/"]
    assert len(Keyspace("p", "c", 3).cluster_prefixes()) == 8


def test_parse_round_trip_and_rejects() -> None:
    ks = Keyspace("custom-prefix", "kafkaCluster1", 5)
    key = ks.segment_key("topic-with-dash", 12, 99, FileKind.INDEX)
    assert ks.parse(key) == ParsedKey("kafkaCluster1", "topic-with-dash", 12, SegmentFileName(99, FileKind.INDEX))
    assert ks.parse(ks.offset_wm_key("topicA", 0)).segment is None
    parts = key.split("/")
    parts[1] = "".join("1" if c == "0" else "0" for c in parts[1])  # wrong entropy for the partition
    with pytest.raises(InvalidSegmentNameError, match="entropy"):
        ks.parse("/".join(parts))
    with pytest.raises(InvalidSegmentNameError):
        ks.parse("other/01011/kafkaCluster1/topicA-0/offset.wm")
    with pytest.raises(InvalidSegmentNameError):
        ks.parse(ks.partition_prefix("topicA", 0) + "notes.txt")


def test_invalid_cluster_name() -> None:
    with pytest.raises(ConfigError):
        Keyspace("p", "")
    with pytest.raises(ConfigError):
        Keyspace("p", "a/b")


def test_gap_marker_keys() -> None:
    ks = Keyspace("custom-prefix", "kafkaCluster1", 5)
    key = ks.gap_key("topicA", 0, 100, 199)
    assert key == "custom-prefix/01011/kafkaCluster1/topicA-0/gaps/00000000000000000100-00000000000000000199"
    assert ks.parse_gap_key(key) == ("topicA", 0, 100, 199)
    with pytest.raises(InvalidSegmentNameError):
        ks.parse(key)  # not a segment key
    with pytest.raises(InvalidSegmentNameError):
        ks.parse_gap_key(ks.segment_key("topicA", 0, 100, FileKind.LOG))


def test_coverage_start_key_sits_beside_offset_wm() -> None:
    ks = Keyspace(prefix="custom-prefix", cluster="kafkaCluster1", entropy_bits=5)
    key = ks.coverage_start_key("topicA", 0)
    assert key == "custom-prefix/01011/kafkaCluster1/topicA-0/coverage.json"
    assert key.rsplit("/", 1)[0] == ks.offset_wm_key("topicA", 0).rsplit("/", 1)[0]
    assert ks.parse_coverage_start_key(key) == ("topicA", 0)
    with pytest.raises(InvalidSegmentNameError):
        ks.parse(key)  # not a segment: segment listings pass it by
    with pytest.raises(InvalidSegmentNameError):
        ks.parse_coverage_start_key(ks.offset_wm_key("topicA", 0))
    with pytest.raises(InvalidSegmentNameError):
        ks.parse_coverage_start_key("custom-prefix/00000/kafkaCluster1/topicA-0/coverage.json")  # wrong entropy


def test_expired_key_sits_beside_offset_wm() -> None:
    ks = Keyspace(prefix="p", cluster="c", entropy_bits=0)
    key = ks.expired_key("t", 3)
    assert key == "p/c/t-3/expired.json"
    assert ks.parse_partition_file_key(key, "expired.json") == ("t", 3)
    with pytest.raises(InvalidSegmentNameError):
        ks.parse_partition_file_key(key, "coverage.json")
