"""``make run`` stops its parts in one order, whatever order they were started in."""

from __future__ import annotations

import pytest

from tiered_kafka_dev.stack import SHUTDOWN_ORDER, shutdown_stages


def test_stages_close_readers_gateway_agent_broker_services_in_that_order() -> None:
    assert SHUTDOWN_ORDER == ("readers", "gateway", "agent", "broker", "services")
    closed: list[str] = []
    with shutdown_stages(lambda: closed.append("stopping")) as stages:
        # started as the stack starts them: services, broker, agent, a reader, then the gateway
        for name in ("services", "services", "broker", "agent", "readers", "gateway", "readers"):
            stages[name].callback(closed.append, name)
    assert closed == ["stopping", "readers", "readers", "gateway", "agent", "broker", "services", "services"]


def test_an_interrupted_start_still_closes_what_was_started_in_order() -> None:
    closed: list[str] = []
    with pytest.raises(KeyboardInterrupt), shutdown_stages() as stages:
        stages["services"].callback(closed.append, "services")
        stages["readers"].callback(closed.append, "readers")
        stages["broker"].callback(closed.append, "broker")
        raise KeyboardInterrupt
    assert closed == ["readers", "broker", "services"]
