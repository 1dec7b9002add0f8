"""A Spark standalone cluster (a master, two workers of one core) and the Spark tests' tiered stack.

The stack (broker, agent, gateway; topic ``events``, EVENTS_COUNT records over EVENTS_PARTITIONS
partitions) is the fixture of ``tests/integration/spark/conftest.py``, imported here so this
package gets its own instance. The cluster is package-scoped; a SparkSession on it is
module-scoped: the cluster has two cores, and a module that runs ``spark-submit`` needs them free.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.spark.conftest import stack  # noqa: F401 - the shared stack fixture, instantiated for this package
from tiered_kafka_dev.services import SparkStandaloneCluster

WORKERS = 2


@pytest.fixture(scope="package")
def spark_cluster() -> Iterator[SparkStandaloneCluster]:
    with SparkStandaloneCluster(WORKERS, cores=1, memory="1g") as cluster:
        yield cluster


def stop_local_spark() -> None:
    """Stop the shared local session (``tests/conftest.py``) if it runs: a process holds one
    SparkContext, and ``cluster_session`` refuses to connect beside one on another master."""
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None and not active.master.startswith("spark://"):
        active.stop()


@pytest.fixture(scope="module")
def spark(spark_cluster: SparkStandaloneCluster) -> Iterator[Any]:
    from tiered_kafka.spark.cluster_session import cluster_session

    stop_local_spark()
    session = cluster_session(spark_cluster.master_url, "tiered-kafka-cluster-tests", executors=WORKERS)
    yield session
    session.stop()


def task_executors(spark: Any, group: str) -> Counter[str]:
    """Executor id → number of tasks, over every stage of the jobs run in job group ``group``
    (Spark's status store: ``AppStatusStore.taskList``; the driver's own id is ``driver``)."""
    context = spark.sparkContext
    tracker = context.statusTracker()
    store = context._jsc.sc().statusStore()
    counts: Counter[str] = Counter()
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        assert job is not None, f"job {job_id} of group {group} is not known to the status tracker"
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:  # a stage skipped (its output reused) never ran
                continue
            tasks = store.taskList(stage_id, stage.currentAttemptId, 1_000_000)
            for i in range(tasks.size()):
                counts[tasks.apply(i).executorId()] += 1
    return counts


def registered_executors(spark: Any) -> set[str]:
    """The ids of the executors registered with the driver (the driver itself left out)."""
    infos = spark.sparkContext._jsc.sc().statusStore().executorList(True)
    ids = {infos.apply(i).id() for i in range(infos.size())}
    return ids - {"driver"}
