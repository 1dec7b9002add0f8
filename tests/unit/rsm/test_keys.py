"""Object keys (ObjectKeyFactory): the RSM's ObjectKeyFactoryTest vectors and parsing from the right."""

from __future__ import annotations

from typing import Any

import pytest

from tiered_kafka.errors import RsmFormatError
from tiered_kafka.rsm.keys import RsmSegmentKey, parse_key, segment_key, uuid_from_bytes, uuid_to_bytes


def test_object_key_factory_vectors(vectors: dict[str, Any]) -> None:
    v = vectors["ObjectKeyFactoryTest"]
    key = RsmSegmentKey(v["prefix"], v["topic"], v["topicId"], v["partition"], v["startOffset"], v["segmentId"])
    for suffix in ("log", "indexes", "rsm-manifest"):
        assert key.object_key(suffix) == v[suffix]
        assert parse_key(v[suffix], v["prefix"]) == (key, suffix)
    assert key.partition_prefix == "prefix/topic-AAAAAAAAAAAAAAAAAAAAAQ/7/"
    assert segment_key(
        prefix="prefix/", topic="topic", topic_id=v["topicId"], partition=7, start_offset=1234,
        segment_id=v["segmentId"], suffix="log",
    ) == v["log"]


def test_uuid_text_form_matches_kafka() -> None:
    # Uuid.METADATA_TOPIC_ID = new Uuid(0L, 1L) prints as AAAAAAAAAAAAAAAAAAAAAQ (ObjectKeyFactoryTest's comment).
    assert uuid_from_bytes(bytes(15) + b"\x01") == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert uuid_to_bytes("AAAAAAAAAAAAAAAAAAAAAQ") == bytes(15) + b"\x01"


@pytest.mark.parametrize(
    "topic, topic_id, segment_id",
    [
        ("my-topic", "-bcdefghijklmnopqrst-w", "_-_-_-_-_-_-_-_-_-_-_w"),
        ("t-", "AAAAAAAAAAAAAAAAAAAAAQ", "-AAAAAAAAAAAAAAAAAAAAA"),
        ("a.b_c-d", "_AAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAA-g"),
    ],
)
def test_ids_with_dashes_and_underscores_parse_from_the_right(topic: str, topic_id: str, segment_id: str) -> None:
    key = RsmSegmentKey("tiered/", topic, topic_id, 12, 98765, segment_id)
    for suffix in ("log", "indexes", "rsm-manifest"):
        assert parse_key(key.object_key(suffix), "tiered/") == (key, suffix)


def test_empty_prefix() -> None:
    key = RsmSegmentKey("", "t", "AAAAAAAAAAAAAAAAAAAAAQ", 0, 0, "AAAAAAAAAAAAAAAAAAAAAA")
    assert key.object_key("log") == "t-AAAAAAAAAAAAAAAAAAAAAQ/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log"
    assert parse_key(key.object_key("log"), "") == (key, "log")


@pytest.mark.parametrize(
    "key, reason",
    [
        ("other/t-AAAAAAAAAAAAAAAAAAAAAQ/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log", "does not start with the prefix"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAQ/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.index", "suffix"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAQ/x/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log", "partition"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAQ/0/0000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log", "file name"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAQ/0/0000000000000000000a-AAAAAAAAAAAAAAAAAAAAAA.log", "start offset"),
        ("p/AAAAAAAAAAAAAAAAAAAAAQ/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log", "directory"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAA!/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log", "topic id"),
        ("p/t-AAAAAAAAAAAAAAAAAAAAAB/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log", "2 bits"),
        ("p/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log", "expected"),
    ],
)
def test_bad_keys_are_named(key: str, reason: str) -> None:
    with pytest.raises(RsmFormatError, match=reason) as info:
        parse_key(key, "p/" if not key.startswith("other/") else "p/")
    assert repr(key) in str(info.value)
