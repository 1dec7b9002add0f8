"""Option parsing and validation of the tiered-kafka Spark source (pure logic, no Spark, no network)."""

from __future__ import annotations

import pytest

from tiered_kafka.errors import ConfigError
from tiered_kafka.spark.options import (
    DEFAULT_MAX_BYTES_PER_PARTITION,
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    OptionError,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
    parse_bytes,
    parse_options,
)

BASE = {"tiered.gateway.url": "http://gw:8080/", "tiered.cluster": "prod"}


def parse(**options: str) -> object:
    return parse_options({**BASE, **options})


def test_defaults_and_case_insensitive_names() -> None:
    options = parse_options({"TIERED.GATEWAY.URL": "http://gw:8080/", "Tiered.Cluster": "prod", "SUBSCRIBE": "a, b,a"})
    assert options.gateway_url == "http://gw:8080" and options.cluster == "prod" and options.token is None
    assert options.selection == Subscribe(("a", "b"))
    assert isinstance(options.starting, Earliest) and isinstance(options.ending, Latest)
    assert options.min_partitions is None and options.max_bytes_per_partition == DEFAULT_MAX_BYTES_PER_PARTITION
    assert options.fail_on_data_loss and not options.include_headers and not options.include_control_records


def test_every_option() -> None:
    options = parse_options(
        {
            **BASE,
            "tiered.gateway.token": "secret",
            "assign": '{"a":[1,0,1],"b":[2]}',
            "startingOffsets": '{"a":{"0":5,"1":-2},"b":{"2":7}}',
            "endingOffsets": '{"a":{"0":-1,"1":9},"b":{"2":8}}',
            "minPartitions": "12",
            "maxBytesPerPartition": "64m",
            "failOnDataLoss": "FALSE",
            "includeHeaders": "true",
            "kafka.bootstrap.servers": "broker:9092",
            "kafka.isolation.level": "read_uncommitted",
        }
    )
    assert options.token == "secret"
    assert options.selection == Assign({"a": (0, 1), "b": (2,)})
    assert options.starting == SpecificOffsets({("a", 0): 5, ("a", 1): -2, ("b", 2): 7}, "startingOffsets")
    assert options.ending == SpecificOffsets({("a", 0): -1, ("a", 1): 9, ("b", 2): 8}, "endingOffsets")
    assert options.min_partitions == 12 and options.max_bytes_per_partition == 64 * 1024 * 1024
    assert not options.fail_on_data_loss and options.include_headers and not options.read_committed
    assert parse(subscribe="a", **{"kafka.isolation.level": "READ_COMMITTED"}).read_committed  # type: ignore[attr-defined]


def test_timestamp_precedence_as_in_spark() -> None:
    options = parse(subscribe="a", startingTimestamp="1000", startingOffsetsByTimestamp='{"a":{"0":5}}', startingOffsets="earliest", endingOffsetsByTimestamp='{"a":{"0":9000}}', endingOffsets="latest")
    assert options.starting == GlobalTimestamp(1000, "startingTimestamp")  # type: ignore[attr-defined]
    assert options.ending == SpecificTimestamps({("a", 0): 9000}, "endingOffsetsByTimestamp")  # type: ignore[attr-defined]
    assert parse(subscribe="a", startingOffsetsByTimestamp='{"a":{"0":5}}', startingOffsets="earliest").starting == SpecificTimestamps(  # type: ignore[attr-defined]
        {("a", 0): 5}, "startingOffsetsByTimestamp"
    )
    assert parse(subscribePattern="a.*", startingOffsetsByTimestampStrategy="LATEST").no_match_start == "latest"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "options 'subscribe' and 'assign' were both given"),
        ({"subscribe": "a", "subscribePattern": "a.*"}, "options 'subscribe' and 'subscribePattern' were both given"),
        ({}, "one of the options 'subscribe', 'subscribePattern', 'assign' must be specified"),
        ({"subscribe": " , "}, "option 'subscribe' names no topic"),
        ({"subscribe": "a,b c"}, "option 'subscribe': invalid topic name(s) 'b c'"),
        ({"subscribePattern": "a(("}, "option 'subscribePattern': 'a((' is not a valid regular expression"),
        ({"assign": "[0]"}, "option 'assign' must be a JSON object"),
        ({"assign": '{"a":[0'}, "option 'assign' is not valid JSON"),
        ({"assign": '{"a":[-1]}'}, "option 'assign': topic 'a' must map to a non-empty list of partition numbers"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":12'}, "option 'startingOffsets' is not valid JSON"),
        ({"subscribe": "a", "startingOffsets": "oldest"}, "option 'startingOffsets' is not valid JSON"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"x":1}}'}, "option 'startingOffsets': topic 'a' has 'x': 1"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, "offsets must be >= 0, or -2 (earliest) / -1 (latest)"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":true}}'}, "expected a partition number and an integer"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "starting offset can't be latest for batch queries"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, "startingOffsets for a-0 can't be latest (-1)"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "ending offset can't be earliest for batch queries"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "endingOffsets for a-0 can't be earliest (-2)"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, "option 'startingTimestamp' should be a long"),
        ({"subscribe": "a", "endingTimestamp": "-5"}, "option 'endingTimestamp' must be >= 0"),
        ({"subscribe": "a", "endingOffsetsByTimestamp": '{"a":{"0":-1}}'}, "option 'endingOffsetsByTimestamp': timestamps must be >= 0"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "earliest"}, "'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'"),
        ({"subscribe": "a", "minPartitions": "0"}, "option 'minPartitions': invalid value '0', must be a positive integer"),
        ({"subscribe": "a", "minPartitions": "many"}, "option 'minPartitions': invalid value 'many'"),
        ({"subscribe": "a", "maxBytesPerPartition": "-1"}, "option 'maxBytesPerPartition' must be a positive byte count"),
        ({"subscribe": "a", "failOnDataLoss": "yes"}, "option 'failOnDataLoss' must be 'true' or 'false'"),
        ({"subscribe": "a", "includeHeaders": "1"}, "option 'includeHeaders' must be 'true' or 'false'"),
        ({"subscribe": "a", "kafka.isolation.level": "serializable"}, "option 'kafka.isolation.level' must be 'read_uncommitted' or 'read_committed'"),
        ({"subscribe": "a", "tiered.cluster": ""}, "option 'tiered.cluster' is required"),
        ({"subscribe": "a", "tiered.gateway.url": "gw:8080"}, "option 'tiered.gateway.url' must start with http://"),
        ({"assign": '{"a":[0,1]}', "startingOffsets": '{"a":{"0":5}}'}, "option 'startingOffsets' must name every assigned partition and only those"),
        ({"assign": '{"a":[0]}', "endingOffsetsByTimestamp": '{"a":{"0":5,"1":6}}'}, "option 'endingOffsetsByTimestamp' must name every assigned partition"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as error:
        parse_options({**BASE, **options})
    assert message in str(error.value)
    assert isinstance(error.value, ConfigError) and isinstance(error.value, ValueError)


def test_unknown_options_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    options = parse(subscribe="a", startingOffset="earliest", maxOffsetsPerTrigger="10", **{"kafka.group.id": "g"})
    assert options.ignored == ("startingoffset",)  # type: ignore[attr-defined]
    assert "ignoring unknown option(s) startingoffset" in caplog.text


def test_topic_partitions_against_the_gateway() -> None:
    available = {"orders": [0, 1, 2], "orders-dlq": [0], "payments": [0, 1]}
    assert parse(subscribe="payments,orders").topic_partitions(available) == [("orders", 0), ("orders", 1), ("orders", 2), ("payments", 0), ("payments", 1)]  # type: ignore[attr-defined]
    # the whole name must match, as Java's Pattern.matcher(topic).matches()
    assert parse(subscribePattern="orders").topic_partitions(available) == [("orders", 0), ("orders", 1), ("orders", 2)]  # type: ignore[attr-defined]
    assert parse(subscribePattern="orders.*").topic_partitions(available)[-1] == ("orders-dlq", 0)  # type: ignore[attr-defined]
    assert parse(assign='{"orders":[2]}').topic_partitions(available) == [("orders", 2)]  # type: ignore[attr-defined]
    assert SubscribePattern("x") == parse(subscribePattern="x").selection  # type: ignore[attr-defined]

    with pytest.raises(OptionError, match=r"option 'subscribe': unknown topic\(s\) 'nope'.*\(topics: orders, orders-dlq, payments\)"):
        parse(subscribe="orders,nope").topic_partitions(available)  # type: ignore[attr-defined]
    with pytest.raises(OptionError, match=r"option 'assign': unknown topic 'nope'"):
        parse(assign='{"nope":[0]}').topic_partitions(available)  # type: ignore[attr-defined]
    with pytest.raises(OptionError, match=r"option 'assign': unknown partition\(s\) \[3, 4\] of topic 'orders' \(the gateway has partitions \[0, 1, 2\]\)"):
        parse(assign='{"orders":[0,3,4]}').topic_partitions(available)  # type: ignore[attr-defined]
    with pytest.raises(OptionError, match=r"option 'subscribePattern': 'ship.*' matches no topic"):
        parse(subscribePattern="ship.*").topic_partitions(available)  # type: ignore[attr-defined]
    with pytest.raises(OptionError, match=r"option 'startingOffsets' must name every partition read and only those .* names \[payments-0\], the read covers \[payments-0, payments-1\]"):
        parse(subscribe="payments", startingOffsets='{"payments":{"0":3}}').topic_partitions(available)  # type: ignore[attr-defined]


def test_parse_bytes() -> None:
    assert parse_bytes("1048576", "x") == 1048576
    assert parse_bytes("64k", "x") == 64 * 1024
    assert parse_bytes(" 128MiB ", "x") == 128 * 1024 * 1024
    assert parse_bytes("1g", "x") == 1024**3
    for bad in ("", "0", "1.5m", "12q", "m"):
        with pytest.raises(OptionError, match="option 'x' must be a positive byte count"):
            parse_bytes(bad, "x")


def test_option_parsing_and_planning_load_without_pyspark() -> None:
    """Only ``datasource``, ``session`` and ``backfill`` import pyspark (the planning and reading code is plain Python + pyarrow)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import tiered_kafka.spark, tiered_kafka.spark.options, tiered_kafka.spark.planning, tiered_kafka.spark.arrow, tiered_kafka.spark.reading\n"
        "print('pyspark' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
