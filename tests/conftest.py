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

FIRST = (
    "tests/integration/sdk/",
    "tests/integration/agent/",
    "tests/integration/spark/",
    "tests/integration/gateway/",
    "tests/integration/rsm/",
    "tests/integration/kafka_listener/",
    "tests/integration/test_remote_lso.py",
    "tests/integration/pinterest/",
    "tests/integration/iceberg/",
    "tests/integration/cluster/",
    "tests/integration/test_transactions_e2e.py",
    "tests/unit/sdk/",
    "tests/integration/test_stack_smoke.py",
    "tests/integration/test_kafka_launchers.py",
)
"""The longest groups (``worker_group``), longest first (as measured by ``--durations=0``): under
``make test``'s workers (``pytest -n``, the scheduler below) a worker takes the next group when it is
done with one, so the long ones start early and the short ones fill in at the end."""


def worker_group(path: str) -> str:
    """The group a test file runs in under pytest-xdist: its package below ``tests/integration/`` or
    ``tests/unit/`` (its package- and module-scoped fixtures then start once, on one worker), or, for
    a module directly in one of those, the module itself."""
    parts = path.split("/")
    return "/".join(parts[:3]) if len(parts) > 3 else path


def _rank(path: str) -> int:
    """Where a test file's group runs: the ``FIRST`` ones in their order, then the rest, ``LAST`` at the end."""
    if path.startswith(LAST):
        return len(FIRST) + 1
    return next((i for i, prefix in enumerate(FIRST) if path.startswith(prefix)), len(FIRST))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the tests by ``_rank`` (stable: within a group, in collection order, so package- and
    module-scoped fixtures still set up once). pytest-xdist's scheduler (below) hands the groups out
    in this order; without it (``pytest`` alone) the order holds the same: ``LAST`` at the end."""
    root = config.rootpath

    def path(item: pytest.Item) -> str:
        return item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else str(item.path)

    items.sort(key=lambda item: _rank(path(item)))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent when it is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's ``loadscope`` scheduling with ``worker_group`` as the scope: a worker takes a
    whole group, the next in collection order (``--no-loadscope-reorder``) when it is done with one.
    (Not ``--dist loadgroup``: it marks a group in the node id, which pytest 9 no longer lets a plugin
    rewrite, so every test became its own group.)"""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid.split("::")[0])

    return GroupScheduling(config, log)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and exitstatus == pytest.ExitCode.OK:
        reporter.write_line(f"FAILED: {len(skipped)} test(s) skipped; skips are not allowed in this suite", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
