"""A smoke test of the `make run` flow: the whole local stack starts, does its job and stops."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def run_until_ctrl_c(tmp_path: Path, while_running: Callable[[str], None] = lambda out: None) -> tuple[int, str, str]:
    """``make run``'s entry point until it waits for Ctrl-C, then ``while_running`` (given its stdout so far), then
    SIGINT, as a terminal sends it (after the Spark stage, whose PySpark replaced the SIGINT handler): exit code,
    stdout, stderr."""
    out_path, err_path = tmp_path / "stack.out", tmp_path / "stack.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        process = subprocess.Popen([sys.executable, "-m", "tiered_kafka_dev.stack", "--records", "6000"], stdout=out, stderr=err)
        try:
            deadline = time.monotonic() + 600
            while "press Ctrl-C to stop" not in err_path.read_text(errors="replace"):
                assert process.poll() is None, err_path.read_text(errors="replace")[-2000:]
                assert time.monotonic() < deadline, "the stack never got to waiting for Ctrl-C"
                time.sleep(0.5)
            try:
                while_running(out_path.read_text(errors="replace"))
            finally:  # a failed check still stops the stack as Ctrl-C does: a SIGKILL would leave its services running
                process.send_signal(signal.SIGINT)
                code = process.wait(120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)
    return code, out_path.read_text(errors="replace"), err_path.read_text(errors="replace")


def test_stack_runs_the_demo_and_stops_cleanly(tmp_path) -> None:
    """One run of the whole flow (it takes about a minute, Spark included), checked stage by
    stage, then Ctrl-C: it stops in order, exit code 0, no traceback."""
    read: list[tuple[int, int]] = []

    def run_the_printed_kcat(out: str) -> None:  # as a user copies it from the terminal, with -J to check what it read
        printed = re.search(r"^Kafka listener 127\.0\.0\.1:\d+ .*try: (kcat [^)]+)\)$", out, re.M)
        assert printed, out
        done = subprocess.run([*shlex.split(printed[1]), "-f", "%p %o\\n", "-q"], capture_output=True, timeout=120)  # values are binary
        assert done.returncode == 0, done.stderr[-2000:]
        read.extend(sorted(tuple(map(int, line.split())) for line in done.stdout.decode().splitlines() if line.strip()))  # type: ignore[misc]

    code, out, err = run_until_ctrl_c(tmp_path, run_the_printed_kcat)
    assert code == 0, err[-2000:]
    # make run's kcat command read the demo topic through the gateway's Kafka listener: every offset from 0, once
    ends = {p: sum(1 for q, _ in read if q == p) for p in (0, 1)}
    assert read == [(p, o) for p in (0, 1) for o in range(ends[p])] and sum(ends.values()) == 6000, (ends, read[:5])
    assert "Traceback" not in err and "Traceback" not in out, err[-3000:]
    assert err.rstrip().endswith("stopping ..."), err[-2000:]
    kafka = re.search(r"^Kafka\s+127\.0\.0\.1:\d+\s+\(Apache Kafka [\d.]+, KRaft node \d+, log\.dirs ([^\s)]+)\)$", out, re.M)
    assert kafka, out
    assert re.search(r"^Agent\s+http://127\.0\.0\.1:\d+/metrics .*leadership from Kafka's Admin API", out, re.M), out
    segments = re.search(r"segments on disk: partition 0: (\d+), partition 1: (\d+)", out)
    assert segments and int(segments[1]) > 1 and int(segments[2]) > 1
    on_disk = {0: int(segments[1]), 1: int(segments[2])}
    assert "read back 6000 records from Kafka" in out

    # the agent uploaded and registered every rotated segment of both partitions
    summary = re.search(r"agent uploaded (\d+) segments \([\d.]+ MiB\) to s3://[\w.-]+/tiered/ and registered offsets 0\.\.(\d+) of demo-0, 0\.\.(\d+) of demo-1 in Redis", out)
    assert summary, out
    partitions = {
        int(m[1]): (int(m[2]), int(m[3]), int(m[4]))
        for m in re.finditer(r"^  demo-(\d): (\d+) segments registered, offsets 0\.\.(\d+); the active segment on the broker starts at offset (\d+)$", out, re.M)
    }
    assert sorted(partitions) == [0, 1], out
    assert int(summary[1]) == sum(count for count, _, _ in partitions.values())
    for p, (count, last, active_base) in partitions.items():
        assert count == on_disk[p] - 1  # every segment but the active one
        assert last + 1 == active_base  # registered offsets end right where the broker's active segment starts
        assert last == int(summary[2 + p])
    assert "NOT contiguous" not in out
    assert re.search(r"^  object_key   s3://[\w.-]+/tiered/[01]{3}/local/demo-[01]/\d{20}\.log  \(\d+ bytes in S3\)$", out, re.M), out
    assert re.search(r"^agent metrics: http://127\.0\.0\.1:\d+/metrics$", out, re.M)

    # the gateway: a presigned range, then JSON records handed off from remote to Kafka
    assert re.search(r"^Gateway\s+http://127\.0\.0\.1:\d+", out, re.M)
    plan = re.search(r"offsets (\d+)\.\.(\d+)\) fetched through its presigned URL decodes to offsets (\d+)\.\.(\d+)", out)
    assert plan and plan[1] == plan[3] == "0" and plan[2] == plan[4]
    records = re.search(r"offsets \[(\d+), (\d+)\] came from remote, offsets \[(\d+), (\d+)\] from kafka", out)
    assert records and [int(x) for x in records.groups()] == list(range(int(records[1]), int(records[1]) + 4))

    # the SDK in each mode: every offset once, in order, from the sources the mode says
    log_start = int(re.search(r"moved the broker's log start of demo-0 to offset (\d+)", out)[1])
    sdk = {
        m[1]: {int(p[1]): (int(p[2]), int(p[3]), int(p[4]), int(p[5]), int(p[6])) for p in re.finditer(r"demo-(\d) offsets (\d+)\.\.(\d+) \((\d+) records: (\d+) remote, (\d+) kafka\)", m[2])}
        for m in re.finditer(r"^SDK (\w+)\s+(.*)$", out, re.M)
    }
    assert sorted(sdk) == ["KAFKA_ONLY", "KAFKA_PREFERRED", "REMOTE_ONLY", "REMOTE_PREFERRED"], out
    for p, (count, last, _active) in partitions.items():
        assert sdk["REMOTE_ONLY"][p] == (0, last, last + 1, last + 1, 0)
        assert sdk["REMOTE_PREFERRED"][p] == (0, 2999, 3000, last + 1, 3000 - last - 1)
    assert sdk["KAFKA_ONLY"][0] == (log_start, 2999, 3000 - log_start, 0, 3000 - log_start)
    assert sdk["KAFKA_PREFERRED"][0] == (0, 2999, 3000, log_start, 3000 - log_start)  # remote until Kafka's log start
    assert sdk["KAFKA_PREFERRED"][1] == sdk["KAFKA_ONLY"][1] == (0, 2999, 3000, 0, 3000)

    # Spark: the data source reads what is remote, the backfill's Parquet matches the registry
    for p, (count, last, _active) in partitions.items():
        assert re.search(rf"^  demo-{p}: {last + 1} rows, offsets 0\.\.{last},", out, re.M), out
    assert "check: row counts match the registry" in out

    for name in ("TIERED_KAFKA_BOOTSTRAP_SERVERS", "TIERED_KAFKA_REDIS_URL", "TIERED_KAFKA_S3_ENDPOINT_URL", "TIERED_KAFKA_AGENT_METRICS_URL", "TIERED_KAFKA_GATEWAY_URL"):
        assert f"export {name}=" in out
    assert not Path(kafka[1]).exists()  # the temporary log.dir is removed on exit
