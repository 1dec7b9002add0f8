"""Pure logic of the ``tiered-kafka`` stream: offsets JSON, Kafka's rate limit, stream options."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered_kafka.client.gateway import PartitionExtent, RemoteExtent
from tiered_kafka.spark.options import Earliest, Latest, OptionError, SpecificOffsets
from tiered_kafka.spark.stream_planning import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    StreamOffsetError,
    new_offsets,
    offsets_from_json,
    offsets_to_json,
    parse_duration_ms,
    parse_stream_options,
    rate_limit,
    stream_end,
)
from tiered_kafka.errors import RemoteReadError

BASE = {"tiered.gateway.url": "http://gw:8080", "tiered.cluster": "c", "subscribe": "t"}

offsets_maps = st.dictionaries(
    st.tuples(st.text("abc.-_", min_size=1, max_size=5), st.integers(0, 200)), st.integers(0, 2**62), max_size=12
)


@given(offsets_maps)
def test_offsets_json_round_trip(offsets: dict[tuple[str, int], int]) -> None:
    data = offsets_to_json(offsets)
    text = json.dumps(data)
    assert offsets_from_json(json.loads(text)) == offsets
    # canonical: equal offsets are equal JSON whatever the insertion order (the engine compares them)
    assert json.dumps(offsets_to_json(dict(reversed(list(offsets.items()))))) == text


def test_offsets_json_is_the_kafka_source_shape() -> None:
    data = offsets_to_json({("b", 10): 5, ("a", 2): 7, ("a", 10): 1, ("b", 0): 0})
    assert json.dumps(data) == '{"a": {"2": 7, "10": 1}, "b": {"0": 0, "10": 5}}'


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1], r"must be a JSON object"),
        ({"t": [0]}, r"topic 't' must map to an object"),
        ({"t": {"x": 1}}, r"'t' has 'x': 1"),
        ({"t": {"0": -1}}, r"'t' has '0': -1; expected a partition number and an offset >= 0"),
        ({"t": {"0": True}}, r"'t' has '0': True"),
    ],
)
def test_bad_offsets_json_names_the_entry(data: object, message: str) -> None:
    with pytest.raises(StreamOffsetError, match=message):
        offsets_from_json(data)


def test_rate_limit_splits_proportionally_like_kafka() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 600, ("t", 1): 400, ("t", 2): 150}  # 600, 300, 100 available: 1000
    assert rate_limit(100, start, latest, {}) == {("t", 0): 60, ("t", 1): 130, ("t", 2): 60}
    # more than available: the latest offsets
    assert rate_limit(5000, start, latest, {}) == latest


def test_rate_limit_never_starves_a_small_partition_and_new_partitions_start_at_earliest() -> None:
    start = {("t", 0): 0}
    latest = {("t", 0): 10_000, ("t", 1): 1_005, ("t", 2): 30}
    earliest = {("t", 1): 1_000, ("t", 2): 30}  # t-2 is new with nothing to read: left at its end
    out = rate_limit(10, start, latest, earliest)
    # shares 10 * 10000/10005 = 9.995 → 9; 10 * 5/10005 < 1 → 1 (Kafka: ceil below one)
    assert out == {("t", 0): 9, ("t", 1): 1_001, ("t", 2): 30}
    assert new_offsets(start, out, earliest) == 10


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), min_size=1, max_size=8),
    st.integers(1, 5_000),
)
def test_rate_limit_bounds(pairs: list[tuple[int, int]], limit: int) -> None:
    start = {("t", p): min(a, b) for p, (a, b) in enumerate(pairs)}
    latest = {("t", p): max(a, b) for p, (a, b) in enumerate(pairs)}
    out = rate_limit(limit, start, latest, {})
    assert all(start[tp] <= out[tp] <= latest[tp] for tp in latest)
    with_data = sum(1 for tp in latest if latest[tp] > start[tp])
    assert new_offsets(start, out, {}) <= limit + with_data  # each partition rounds up by less than one
    if new_offsets(start, latest, {}) > 0:
        assert new_offsets(start, out, {}) > 0  # a limit always makes progress


def test_stream_options() -> None:
    options = parse_stream_options({**BASE, "maxOffsetsPerTrigger": "100", "MINOFFSETSPERTRIGGER": "10", "maxTriggerDelay": "30s"})
    assert (options.max_offsets_per_trigger, options.min_offsets_per_trigger, options.max_trigger_delay_ms) == (100, 10, 30_000)
    assert isinstance(options.read.starting, Latest)  # Kafka's streaming default
    assert parse_stream_options(BASE).max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS
    assert isinstance(parse_stream_options({**BASE, "startingOffsets": "earliest"}).read.starting, Earliest)
    spec = parse_stream_options({**BASE, "startingOffsets": '{"t":{"0":-1,"1":-2,"2":7}}'}).read.starting
    assert isinstance(spec, SpecificOffsets) and spec.offsets == {("t", 0): -1, ("t", 1): -2, ("t", 2): 7}
    assert parse_duration_ms("15m", "x") == 900_000 and parse_duration_ms("250ms", "x") == 250 and parse_duration_ms("2h", "x") == 7_200_000


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endingOffsets": "latest"}, r"option 'endingOffsets' is not valid in streaming queries"),
        ({"endingTimestamp": "5"}, r"option 'endingTimestamp' is not valid in streaming queries"),
        ({"maxOffsetsPerTrigger": "0"}, r"option 'maxOffsetsPerTrigger': invalid value '0'"),
        ({"maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "9"}, r"'minOffsetsPerTrigger' \(9\) must not exceed 'maxOffsetsPerTrigger' \(5\)"),
        ({"maxTriggerDelay": "soon"}, r"option 'maxTriggerDelay' must be a duration"),
        ({"tiered.mode": "remote_preferred"}, r"option 'kafka.bootstrap.servers' is required with tiered.mode=REMOTE_PREFERRED"),
        ({"tiered.mode": "kafka_only"}, r"option 'tiered.mode': 'KAFKA_ONLY' is not supported by the tiered-kafka Spark source: use Spark's format\(\"kafka\"\)"),
    ],
)
def test_bad_stream_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_stream_options({**BASE, **options})


def test_stream_end_is_remote_end_or_lso() -> None:
    extent = PartitionExtent(RemoteExtent(10, 99, 3, 1000, last_stable_offset=60), None, None)
    assert stream_end(extent, ("t", 0), False) == 100
    assert stream_end(extent, ("t", 0), True) == 60
    assert stream_end(PartitionExtent(None, None, None), ("t", 0), False) is None
    unknown = PartitionExtent(RemoteExtent(10, 99, 3, 1000), None, None)
    with pytest.raises(RemoteReadError, match=r"t-0: kafka.isolation.level=read_committed streams stop at remote storage's last stable offset, which is unknown"):
        stream_end(unknown, ("t", 0), True)
