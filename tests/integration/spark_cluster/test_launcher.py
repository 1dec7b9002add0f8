"""``SparkStandaloneCluster``: real daemons from the pyspark installation, registered, small heaps,
and stopped by their own process ids with their directories removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiered_kafka_dev.services import SparkStandaloneCluster
from tiered_kafka_dev.services._process import pid_alive
from tiered_kafka_dev.services._spark import DAEMON_MEMORY

pytestmark = pytest.mark.integration


def test_one_worker_cluster_registers_and_stops_its_own_processes() -> None:
    with SparkStandaloneCluster(1, cores=1, memory="1g") as cluster:
        master, (worker,) = cluster.master, cluster.workers
        pids = [master.pid, worker.pid]
        dirs = [master.workdir, worker.workdir]
        assert None not in pids and None not in dirs
        for pid, main_class in zip(pids, ("org.apache.spark.deploy.master.Master", "org.apache.spark.deploy.worker.Worker"), strict=True):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert argv[0].endswith(b"java") and main_class.encode() in argv  # spark-class exec'd the JVM: the pid is the daemon's
            assert f"-Xmx{DAEMON_MEMORY}".encode() in argv  # SPARK_DAEMON_MEMORY
        entry = worker.registration()
        assert entry is not None and (entry["state"], entry["cores"], entry["memory"]) == ("ALIVE", 1, 1024)
        assert master.state()["url"] == cluster.master_url
    assert not [pid for pid in pids if pid is not None and pid_alive(pid)]
    assert not [d for d in dirs if d is not None and d.exists()]
    assert not cluster.running


def test_a_cluster_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker, got 0"):
        SparkStandaloneCluster(0)
