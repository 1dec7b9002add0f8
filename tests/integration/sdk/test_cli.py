"""``tiered-kafka cat`` never exits 0 with empty output when data was asked for, and terminates
under read_committed at remote storage's last stable offset (a subprocess over the real gateway,
SeaweedFS and Redis, with the hand-built transactional log the agent uploaded)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.stack_env import gateway_server
from tests.support.transactions import COMMITTED_OFFSETS, UNCOMMITTED_OFFSETS, uploaded_transactional_log
from tiered_kafka.registry import Registry

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).parent / "tiered-kafka"
READER, OUTSIDER = "r" * 24, "o" * 24


def cat(url: str, cluster: str, *args: str) -> tuple[int, list[int], str]:
    """Run ``tiered-kafka cat`` (REMOTE_ONLY): exit status, offsets printed, stderr."""
    done = subprocess.run([str(CLI), "cat", "--gateway", url, "--cluster", cluster, *args], capture_output=True, text=True, timeout=120)
    return done.returncode, [json.loads(line)["offset"] for line in done.stdout.splitlines()], done.stderr


@pytest.fixture
def txn(tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> Any:
    """Topic ``txn`` partition 0 (tests/support/transactions.py), segments 0 and 14 uploaded."""
    return uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)


def test_cat_under_read_committed_stops_at_the_last_stable_offset(txn: Any, s3_server: Any) -> None:
    with gateway_server(txn, s3_server) as url:
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0")  # read_committed is the default
        assert (code, offsets) == (0, COMMITTED_OFFSETS), stderr
        assert "stopped at offset 19, the last stable offset" in stderr
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--isolation-level", "read_uncommitted")
        assert (code, offsets) == (0, UNCOMMITTED_OFFSETS), stderr
        # a range ending right after control batches and aborted records: positions pass them
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--from", "9", "--to", "13")
        assert code == 1 and offsets == [] and "read nothing of offsets 9..12" in stderr, stderr
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--from", "9", "--to", "14")
        assert (code, offsets) == (0, [13]), stderr
        # from inside the open transaction: nothing is visible yet, and cat says so
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--from", "19")
        assert code == 1 and offsets == [] and "transaction open at offset 19" in stderr, stderr


def test_cat_of_what_cannot_be_read_exits_non_zero_naming_why(txn: Any, s3_server: Any) -> None:
    with gateway_server(txn, s3_server) as url:
        code, offsets, stderr = cat(url, txn.cluster, "no-such-topic", "0")
        assert code == 1 and offsets == [] and "UNKNOWN_TOPIC_OR_PART" in stderr, stderr
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--from", "30")
        assert code == 1 and offsets == [] and "OFFSET_OUT_OF_RANGE" in stderr and "the end is 22" in stderr, stderr
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--from", "22")  # exactly at the end: nothing to read
        assert code == 1 and offsets == [] and "OFFSET_OUT_OF_RANGE" in stderr, stderr
        # an empty range asked explicitly is not an error, and says so
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--from", "5", "--to", "5")
        assert code == 0 and offsets == [] and "empty range" in stderr, stderr


def test_cat_of_unreadable_remote_data_exits_non_zero(txn: Any, s3_server: Any, redis_server: Any) -> None:
    """The first segment's object is gone from S3 though the registry lists it: --from 0 cannot be read."""
    import redis

    registry = Registry(redis.Redis.from_url(redis_server.url), txn.cluster)
    first = registry.segments("txn", 0)[0]
    s3_server.client().delete_object(Bucket=txn.s3.bucket, Key=first.object_key)
    with gateway_server(txn, s3_server) as url:
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--from", "0")
    assert code == 1 and offsets == [], stderr
    # the plan comes from the batch index (no .log read at planning), so the missing object is
    # found by the presigned GET: S3's 404, after one re-plan, naming the object; the consumer
    # delivers it as the partition's error message (_TRANSPORT, its one error channel)
    assert "_TRANSPORT" in stderr and "00000000000000000000.log" in stderr and "(404)" in stderr and "re-planning" in stderr, stderr
    assert "attempts" not in stderr  # not retried: missing bytes are not a transient failure


def test_cat_with_a_token_that_lacks_the_topic_names_topic_authorization_failed(txn: Any, s3_server: Any) -> None:
    with gateway_server(txn, s3_server, auth={"enabled": True, "tokens": {READER: ["txn"], OUTSIDER: ["other-.*"]}}) as url:
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--token", OUTSIDER)
        assert code == 1 and offsets == [] and "TOPIC_AUTHORIZATION_FAILED" in stderr and "'txn'" in stderr, stderr
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--token", "w" * 24)
        assert code == 1 and offsets == [] and "401" in stderr and "not accepted" in stderr and "w" * 24 not in stderr, stderr
        code, offsets, stderr = cat(url, txn.cluster, "txn", "0", "--token", READER)
        assert (code, offsets) == (0, COMMITTED_OFFSETS), stderr


@pytest.mark.parametrize("mode", ["REMOTE_PREFERRED", "KAFKA_PREFERRED"])
def test_cat_with_a_token_that_lacks_the_topic_fails_in_the_modes_reading_kafka(retained: Any, s3_server: Any, mode: str) -> None:
    """Partition 0 of ``orders`` from offset 0: below Kafka's log start, so only remote storage has
    it. Kafka would serve the rest, but a 403 is not "nothing remote": exit 1, the error, no output."""
    stack, log_starts = retained
    assert log_starts[0] > 10
    with gateway_server(stack.agent, s3_server, stack.bootstrap, auth={"enabled": True, "tokens": {READER: ["orders"], OUTSIDER: ["other-.*"]}}) as url:

        def run(token: str) -> subprocess.CompletedProcess[str]:
            args = ["cat", "orders", "0", "--gateway", url, "--cluster", stack.cluster, "--bootstrap-servers", stack.bootstrap, "--mode", mode, "--from", "0", "--to", "10", "--token", token]
            return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=120)

        refused = run(OUTSIDER)
        assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
        assert "TOPIC_AUTHORIZATION_FAILED" in refused.stderr and "'orders'" in refused.stderr, refused.stderr
        allowed = run(READER)  # the same read with a token that covers the topic
        assert allowed.returncode == 0, allowed.stderr
        assert [json.loads(line)["offset"] for line in allowed.stdout.splitlines()] == list(range(10))
