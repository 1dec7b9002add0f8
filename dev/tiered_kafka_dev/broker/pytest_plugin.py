"""pytest fixtures for the development broker.

- ``dev_broker``: a started broker on a free port with a fresh log.dir; stopped afterwards.
- ``start_dev_broker``: a factory, ``start_dev_broker(log_dir, **config)``, for tests that
  restart a broker on the same log.dir or need particular settings; every broker it started is
  stopped at the end of the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tiered_kafka_dev.broker.config import BrokerConfig
from tiered_kafka_dev.broker.server import Broker, BrokerThread

StartBroker = Callable[..., BrokerThread]


@pytest.fixture
def start_dev_broker(tmp_path: Path) -> Iterator[StartBroker]:
    started: list[BrokerThread] = []

    def start(log_dir: Path | None = None, **config: Any) -> BrokerThread:
        broker = Broker(BrokerConfig(log_dir=log_dir or tmp_path / "kafka-logs", **config))
        thread = broker.run_in_thread()
        started.append(thread)
        return thread

    yield start
    for thread in reversed(started):
        thread.stop()


@pytest.fixture
def dev_broker(start_dev_broker: StartBroker) -> BrokerThread:
    return start_dev_broker()
