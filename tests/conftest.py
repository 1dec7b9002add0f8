"""Shared test configuration.

The real local services (Apache Kafka, Redis, ZooKeeper, SeaweedFS) come from the fixtures of
``tiered_kafka_dev.services.pytest_plugin``. A skipped test is never counted as passing:
any skip fails the session (a missing service must be installed by ``dev/install.sh``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest_plugins = ["tiered_kafka_dev.services.pytest_plugin"]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for every test that reads through Spark: a session's JVM start
    costs ~10 s of the 2 CPUs, once instead of once per package. The standalone-cluster tests
    (``tests/integration/spark_cluster``) stop it before they connect to their master, as a process
    holds one SparkContext: they run last (``pytest_collection_modifyitems``), so no test after them
    needs this one."""
    from tiered_kafka.spark.session import local_session

    session = local_session("local[2]", "tiered-kafka-tests")
    yield session
    session.stop()


LAST = ("tests/integration/spark_cluster/",)
"""Tests run after every other one: the standalone Spark cluster's stop the shared local session (``spark``)."""


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the tests under ``LAST`` to the end, keeping the order within each group (so package- and
    module-scoped fixtures still set up once)."""
    root = config.rootpath

    def last(item: pytest.Item) -> bool:
        return item.path.is_relative_to(root) and item.path.relative_to(root).as_posix().startswith(LAST)

    items[:] = [i for i in items if not last(i)] + [i for i in items if last(i)]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and exitstatus == pytest.ExitCode.OK:
        reporter.write_line(f"FAILED: {len(skipped)} test(s) skipped; skips are not allowed in this suite", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
