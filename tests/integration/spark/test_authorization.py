"""A Spark read with a gateway token that does not cover the topic fails with Kafka's
TOPIC_AUTHORIZATION_FAILED (the gateway's 403, raised by the gateway client), never with an
empty DataFrame or an "unknown topic"; the same read with a token that covers it returns the rows."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.spark.conftest import EVENTS, EVENTS_PARTITIONS
from tests.support.stack_env import TieredStack, gateway_server

pytestmark = pytest.mark.integration

READER, OUTSIDER = "r" * 24, "o" * 24


@pytest.mark.parametrize("selection", [{"assign": f'{{"{EVENTS}":[0]}}'}, {"subscribe": EVENTS}])
def test_a_token_without_the_topic_fails_the_read_with_topic_authorization_failed(spark: Any, stack: TieredStack, s3_server: Any, selection: dict[str, str]) -> None:
    auth = {"enabled": True, "tokens": {READER: [EVENTS], OUTSIDER: ["other-.*"]}}
    with gateway_server(stack.agent, s3_server, stack.bootstrap, auth=auth) as url:
        options = {"tiered.gateway.url": url, "tiered.cluster": stack.cluster, **selection}
        with pytest.raises(Exception, match=r"TOPIC_AUTHORIZATION_FAILED.*'events'") as raised:
            spark.read.format("tiered-kafka").options(**options, **{"tiered.gateway.token": OUTSIDER}).load().collect()
        assert "unknown topic" not in str(raised.value)
        allowed = spark.read.format("tiered-kafka").options(**options, **{"tiered.gateway.token": READER}).load()
        partitions = {row["partition"] for row in allowed.select("partition").distinct().collect()}
        assert partitions == ({0} if "assign" in selection else set(range(EVENTS_PARTITIONS)))
