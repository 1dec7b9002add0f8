"""Issue 36, finding 10: a topic name Kafka forbids (``.``, ``..``, characters outside
``[A-Za-z0-9._-]``, more than 249 of them) is refused at every boundary it enters by, with the one
rule (``tiered_kafka.topic_names``): the partition-directory parser (the agent's listing of
log.dir), the registry's keys, the gateway client's URLs (before any request: ``..`` would be a
dot-segment the URL loses) and the Spark options (``subscribe`` and ``assign``). The gateway's own
path parameter: ``tests/integration/gateway/test_security_review.py``."""

from __future__ import annotations

import json

import httpx
import pytest

from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.errors import ConfigError, InvalidSegmentNameError
from tiered_kafka.format.segment_names import parse_partition_dir_name
from tiered_kafka.registry._errors import RegistryValueError
from tiered_kafka.registry._layout import partition_index_member, partition_keys
from tiered_kafka.spark.options import OptionError, parse_options
from tiered_kafka.topic_names import MAX_NAME_LENGTH, is_legal_topic_name, topic_name_problem

FORBIDDEN = [".", "..", "", "a" * (MAX_NAME_LENGTH + 1), "bad name", "caf\u00e9", "a/b", "a:b"]
LEGAL = ["orders", "a" * MAX_NAME_LENGTH, "...", ".hidden", "a..b", "__consumer_offsets", "x-1_y.z"]


@pytest.mark.parametrize("name", FORBIDDEN)
def test_the_rule_refuses_what_kafka_refuses(name: str) -> None:
    assert not is_legal_topic_name(name)
    problem = topic_name_problem(name)
    assert problem is not None and len(problem) < 200  # the name quoted, cut
    if name in (".", ".."):
        assert "cannot be '.' or '..'" in problem


@pytest.mark.parametrize("name", LEGAL)
def test_the_rule_accepts_what_kafka_accepts(name: str) -> None:
    assert is_legal_topic_name(name) and topic_name_problem(name) is None
    assert parse_partition_dir_name(f"{name}-3") == (name, 3)
    assert partition_keys("c1", name, 3).segment(0).startswith("tk:{c1/")


@pytest.mark.parametrize("name", [n for n in FORBIDDEN if n])
def test_the_partition_directory_parser_refuses_it(name: str) -> None:
    with pytest.raises(InvalidSegmentNameError, match="not a partition directory name"):
        parse_partition_dir_name(f"{name}-0")


@pytest.mark.parametrize("name", FORBIDDEN)
def test_the_registry_refuses_it_as_a_key(name: str) -> None:
    with pytest.raises(RegistryValueError, match="invalid topic name"):
        partition_keys("c1", name, 0)
    with pytest.raises(RegistryValueError, match="invalid topic name"):
        partition_index_member(name, 0)


@pytest.mark.parametrize("name", FORBIDDEN)
def test_the_gateway_client_refuses_it_before_any_request(name: str) -> None:
    sent: list[httpx.Request] = []
    client = GatewayClient("http://gw", "c1", retries=0, transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(500)))
    for call in (lambda: client.partition(name, 0), lambda: client.plan(name, 0, 0, 1024), lambda: client.offset_for_timestamp(name, 0, 0),
                 lambda: client.time_ranges(name, 0, 0, 1)):
        with pytest.raises(ConfigError, match="topic name"):
            call()
    assert sent == []


@pytest.mark.parametrize("name", [n for n in FORBIDDEN if n])
def test_the_spark_options_refuse_it(name: str) -> None:
    base = {"tiered.gateway.url": "http://gw:8080", "tiered.cluster": "prod"}
    with pytest.raises(OptionError, match="option 'subscribe': invalid topic name"):
        parse_options({**base, "subscribe": f"orders,{name}"})
    with pytest.raises(OptionError, match="option 'assign': invalid topic name"):
        parse_options({**base, "assign": '{"orders": [0], %s: [0]}' % json.dumps(name)})
