"""Streams that live through changes: partitions added to a topic while the query runs
(``AdminClient.create_partitions`` on a real Kafka broker), and a query whose process is
SIGKILLed while a micro-batch is written, then restarted from its checkpoint. Both in REMOTE_ONLY
and REMOTE_PREFERRED; every offset exactly once in a Parquet file sink with a checkpoint (read
back through the sink's ``_spark_metadata`` log, as ``spark.read.parquet`` does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.integration.spark.conftest import read_options, start_parquet_stream, stream_reached
from tests.integration.spark.test_hybrid import watermarks
from tests.support.agent_env import wait_for
from tests.support.kafka_clients import produce, value_for
from tests.support.stack_env import TieredStack, create_tiered_topic

pytestmark = pytest.mark.integration

MODES = ["REMOTE_ONLY", "REMOTE_PREFERRED"]
STREAM_PROCESS = Path(__file__).with_name("stream_process.py")


def record(partition: int, offset: int) -> tuple[bytes, bytes]:
    """The (key, value) produced at ``offset`` of ``partition`` by :func:`produce_per_partition`."""
    return f"p{partition}-o{offset}".encode(), value_for(partition * 1_000_000 + offset)


def produce_per_partition(stack: TieredStack, topic: str, counts: dict[int, tuple[int, int]]) -> None:
    """partition → (first offset, count): records ``record(p, o)``; one idempotent producer, so each
    partition's records land at consecutive offsets from its current end, in order even when a batch
    is retried (without idempotence a retried batch can land after the next one)."""
    messages = [(p, *record(p, o)) for p, (first, count) in counts.items() for o in range(first, first + count)]
    produce(stack.bootstrap, topic, messages, **{"linger.ms": 2, "batch.num.messages": 7, "enable.idempotence": True})


def mode_options(stack: TieredStack, mode: str, **options: Any) -> dict[str, str]:
    extra = {"kafka.bootstrap.servers": stack.bootstrap} if mode != "REMOTE_ONLY" else {}
    return read_options(stack, **{"tiered.mode": mode, **extra, **options})


def stream_ends(stack: TieredStack, topic: str, partitions: int, mode: str) -> dict[int, int]:
    """How far a stream of ``mode`` reads each partition: remote storage's end (REMOTE_ONLY) or
    Kafka's high watermark (REMOTE_PREFERRED)."""
    if mode == "REMOTE_ONLY":
        ends = {}
        for p in range(partitions):
            info = stack.registry.partition_info(topic, p)
            assert info is not None, f"{topic}-{p} has nothing remote"
            ends[p] = info.latest_offset + 1
        return ends
    return {p: high for p, (_low, high) in watermarks(stack, topic, partitions).items()}


def sink_rows(spark: Any, out: Path) -> list[tuple[str, int, int, bytes, bytes]]:
    """(topic, partition, offset, key, value) of the file sink, read through its ``_spark_metadata``."""
    frame = spark.read.parquet(str(out)).select("topic", "partition", "offset", "key", "value")
    return [(r.topic, r.partition, r.offset, r.key, r.value) for r in frame.collect()]


def assert_exactly_once(rows: list[tuple[str, int, int, bytes, bytes]], topic: str, ends: dict[int, int]) -> None:
    """Every offset 0..end-1 of every partition of ``topic`` once, each the record produced there."""
    by_partition: dict[int, list[tuple[int, bytes, bytes]]] = {}
    for t, p, o, k, v in rows:
        assert t == topic
        by_partition.setdefault(p, []).append((o, k, v))
    assert sorted(by_partition) == sorted(ends)
    for p, end in ends.items():
        got = sorted(by_partition[p])
        assert [o for o, _k, _v in got] == list(range(end)), f"partition {p}"
        assert all((k, v) == record(p, o) for o, k, v in got), f"partition {p}"


# -- partitions added while the stream runs ----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_partitions_added_while_the_stream_runs_are_read(spark: Any, stack: TieredStack, tmp_path: Path, mode: str) -> None:
    """A one-partition topic grows to three while a processing-time query reads it: REMOTE_ONLY
    reads the new partitions once the agent has uploaded their first segments, REMOTE_PREFERRED
    from Kafka at once; both from offset 0 (Kafka's source: "added partition ... starting from
    earliest")."""
    topic = f"live-grow-{mode.lower().replace('_', '-')}"
    create_tiered_topic(stack, topic, 1, segment_bytes=16_000)
    produce_per_partition(stack, topic, {0: (0, 200)})
    stack.wait_uploaded(topic, 1)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = start_parquet_stream(spark, mode_options(stack, mode, subscribe=topic, startingOffsets="earliest"), out, checkpoint)
    try:

        def caught_up(ends: dict[int, int]) -> bool:
            return stream_reached(query, {topic: {str(p): e for p, e in ends.items()}})

        wait_for(lambda: caught_up(stream_ends(stack, topic, 1, mode)), timeout_s=90, what="partition 0 read")
        admin = AdminClient({"bootstrap.servers": stack.bootstrap})  # kept: its futures fail if it is collected first
        for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
            future.result(timeout=30)
        first_of_0 = watermarks(stack, topic, 1)[0][1]
        produce_per_partition(stack, topic, {0: (first_of_0, 100), 1: (0, 150), 2: (0, 150)})
        stack.wait_uploaded(topic, 3)
        ends = stream_ends(stack, topic, 3, mode)
        assert ends[1] > 0 and ends[2] > 0
        if mode == "REMOTE_ONLY":  # the active segments stay in Kafka only: the stream stops before them
            assert all(ends[p] < high for p, (_low, high) in watermarks(stack, topic, 3).items())
        wait_for(lambda: caught_up(ends), timeout_s=90, what="the added partitions read")
    finally:
        query.stop()
    assert_exactly_once(sink_rows(spark, out), topic, ends)


# -- killed mid-batch, restarted ---------------------------------------------------------------------


def committed_files(out: Path) -> set[str]:
    """File names the sink's ``_spark_metadata`` log lists (Spark's ``FileStreamSinkLog``: a version
    line, then one JSON ``SinkFileStatus`` per line)."""
    names: set[str] = set()
    for log in (out / "_spark_metadata").glob("[0-9]*"):
        for line in log.read_text().splitlines()[1:]:
            names.add(Path(json.loads(line)["path"]).name)
    return names


def batch_files(directory: Path) -> set[int]:
    return {int(f.name) for f in directory.glob("[0-9]*")} if directory.is_dir() else set()


def start_stream_process(tmp_path: Path, name: str, spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    """``stream_process.py`` in its own session (its own process group, with its JVM and workers)."""
    spec_path = tmp_path / f"{name}.json"
    spec_path.write_text(json.dumps(spec))
    log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115  # closed when the process is reaped
    try:
        return subprocess.Popen([sys.executable, str(STREAM_PROCESS), str(spec_path)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, process group) of ``pid`` from ``/proc/PID/stat``; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[2])


def descendants(root: int) -> list[int]:
    """Every live process under ``root`` (Linux ``/proc``), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _proc_stat(int(entry.name))) is not None:
            children.setdefault(stat[1], []).append(int(entry.name))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def kill_query_process(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL a query process started by :func:`start_stream_process` and everything it started:
    its process group (the Python driver, the JVM), and the groups PySpark's worker daemons made
    for themselves (``pyspark.daemon`` calls ``setpgid``), found among its descendants beforehand.
    Returns once none of them is left (a zombie no one reaps counts as gone)."""
    tree = descendants(process.pid)
    groups = {process.pid} | {stat[2] for pid in tree if (stat := _proc_stat(pid)) is not None and stat[2] == pid}
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(30)

    def gone() -> bool:
        return all((stat := _proc_stat(pid)) is None or stat[0] == "Z" for pid in tree)

    wait_for(gone, timeout_s=30, what="the killed query's processes gone")


@pytest.mark.parametrize("mode", ["REMOTE_PREFERRED"])  # reads both tiers (a whole-process kill costs ~1 min a mode); REMOTE_ONLY resumes from its checkpoint in test_streaming.py
def test_query_killed_mid_batch_and_restarted_writes_no_duplicate(spark: Any, stack: TieredStack, tmp_path: Path, mode: str) -> None:
    """The query's process (driver, JVM, Python workers) is SIGKILLed while a micro-batch is being
    written: its offsets are in the checkpoint, its commit is not, and part files of it are in the
    sink but not in ``_spark_metadata``. The same query restarted from the checkpoint in a new
    process re-runs that batch and finishes: every offset exactly once."""
    topic = f"live-kill-{mode.lower().replace('_', '-')}"
    partitions = 2
    create_tiered_topic(stack, topic, partitions, segment_bytes=40_000)
    produce_per_partition(stack, topic, {p: (0, 400) for p in range(partitions)})
    stack.wait_uploaded(topic, partitions)
    ends = stream_ends(stack, topic, partitions, mode)
    if mode == "REMOTE_PREFERRED":  # history remote, a tail only in Kafka: the batches cross the handoff
        remote = stream_ends(stack, topic, partitions, "REMOTE_ONLY")
        assert all(0 < remote[p] < ends[p] for p in ends), (remote, ends)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    spec = {
        "options": mode_options(stack, mode, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=120),
        "out": str(out),
        "checkpoint": str(checkpoint),
        "trigger": {"processingTime": "100 milliseconds"},
        "row_delay_s": 0.02,
    }
    first = start_stream_process(tmp_path, "first", spec)
    try:

        def mid_batch() -> bool:
            """A batch planned after a committed one, not committed, with part files not in the manifest."""
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            planned, committed = batch_files(checkpoint / "offsets"), batch_files(checkpoint / "commits")
            if not committed or not planned - committed:
                return False
            return bool({f.name for f in out.glob("part-*")} - committed_files(out))

        wait_for(mid_batch, timeout_s=180, what="a micro-batch being written after a committed one")
    finally:
        kill_query_process(first)
    planned, committed = batch_files(checkpoint / "offsets"), batch_files(checkpoint / "commits")
    orphans = {f.name for f in out.glob("part-*")} - committed_files(out)
    assert planned - committed and orphans, (planned, committed, orphans)  # killed mid-batch, for the record

    second = start_stream_process(tmp_path, "second", {**spec, "trigger": {"availableNow": True}, "row_delay_s": 0})
    try:
        assert second.wait(240) == 0, (tmp_path / "second.log").read_text()[-3000:]
    finally:
        if second.poll() is None:
            kill_query_process(second)
    assert batch_files(checkpoint / "commits") == batch_files(checkpoint / "offsets")
    assert_exactly_once(sink_rows(spark, out), topic, ends)
    # the killed batch's part files are still on disk, outside the manifest: only the log hides them
    assert orphans <= {f.name for f in out.glob("part-*")} and not orphans & committed_files(out)
