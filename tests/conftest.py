"""Shared test configuration.

The real local services (Apache Kafka, Redis, ZooKeeper, SeaweedFS) come from the fixtures of
``tiered_kafka_dev.services.pytest_plugin``. A skipped test is never counted as passing:
any skip fails the session (a missing service must be installed by ``dev/install.sh``).
"""

from __future__ import annotations

import pytest

pytest_plugins = ["tiered_kafka_dev.services.pytest_plugin"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and exitstatus == pytest.ExitCode.OK:
        reporter.write_line(f"FAILED: {len(skipped)} test(s) skipped; skips are not allowed in this suite", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
