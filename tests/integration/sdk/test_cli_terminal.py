"""``tiered-kafka`` as a new user meets it in a terminal (issue 29), as a subprocess over the shared
stack (``retained``: topic ``orders``, whose early offsets only remote storage holds): the exports
``make run`` prints are all it needs (no option on argv, no token on argv), and ``topics`` and
``describe`` answer what a Kafka user asks first, or exit 1 with Kafka's error name."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.sdk.conftest import COUNT, PARTITIONS
from tests.support.stack_env import TieredStack, gateway_server, topic_with_a_lost_segment
from tiered_kafka_dev.stack import DEMO_TOPIC, cli_exports, try_command

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).parent / "tiered-kafka"
READER, OUTSIDER = "r" * 24, "o" * 24


def user_env(tmp_path: Path, **exports: str) -> dict[str, str]:
    """This process's environment without our variables, with a HOME and XDG_CONFIG_HOME of its own
    (no configuration file), plus ``exports``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_KAFKA_")}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "home" / ".config"), **exports)
    return env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=120, env=env)


def test_the_exports_and_the_command_make_run_prints_work_as_pasted(retained: tuple[TieredStack, dict[int, int]], tmp_path: Path) -> None:
    """Before: `tiered-kafka cat demo 0` after pasting the exports failed for want of --gateway."""
    stack, log_starts = retained
    assert log_starts[0] > 10  # offsets 0..9 are in remote storage only
    env = user_env(tmp_path, **cli_exports(stack.gateway_url, stack.cluster, stack.bootstrap))
    words = shlex.split(try_command())
    assert Path(words[0]).name == "tiered-kafka" and words[1:4] == ["cat", DEMO_TOPIC, "0"], words
    assert not any(w.startswith("--gateway") or w.startswith("--cluster") or w.startswith("--token") for w in words)
    done = subprocess.run([str(CLI), "cat", "orders", *words[3:]], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["offset"] for line in done.stdout.splitlines()] == list(range(10))


def test_topics_lists_the_topic_with_its_remote_figures(retained: tuple[TieredStack, dict[int, int]], tmp_path: Path) -> None:
    stack, _ = retained
    env = user_env(tmp_path, **cli_exports(stack.gateway_url, stack.cluster, stack.bootstrap))
    done = run(env, "topics", "--json")
    assert done.returncode == 0, done.stderr
    orders = next(t for t in json.loads(done.stdout)["topics"] if t["name"] == "orders")
    registered = [stack.registry.segments("orders", p) for p in (0, 1)]
    assert orders["partitions"] == orders["remote_partitions"] == 2 and orders["in_kafka"] is True and orders["remote_error"] is None
    assert orders["remote_segments"] == sum(len(s) for s in registered)
    assert orders["remote_bytes"] == sum(e.size for s in registered for e in s)
    assert orders["remote_offsets"] == sum(s[-1].last_offset - s[0].base_offset + 1 for s in registered)
    table = run(env, "topics")
    assert table.returncode == 0 and table.stdout.startswith("TOPIC "), table.stderr
    assert any(line.split()[:3] == ["orders", "2", "2"] for line in table.stdout.splitlines()), table.stdout


def test_describe_shows_each_partitions_remote_and_kafka_ranges(retained: tuple[TieredStack, dict[int, int]], tmp_path: Path) -> None:
    stack, log_starts = retained
    env = user_env(tmp_path, **cli_exports(stack.gateway_url, stack.cluster, stack.bootstrap))
    done = run(env, "describe", "orders", "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert [p["partition"] for p in body["partitions"]] == list(range(PARTITIONS))
    for p in body["partitions"]:
        segments = stack.registry.segments("orders", p["partition"])
        assert p["remote"]["earliest_offset"] == 0 and p["remote"]["latest_offset"] == segments[-1].last_offset
        assert p["remote"]["segments"] == len(segments) and p["remote"]["bytes"] == sum(s.size for s in segments)
        assert p["kafka"] == {"log_start_offset": log_starts[p["partition"]], "high_watermark": COUNT // PARTITIONS}
        assert p["gaps"] == []
        assert time.time() * 1000 - 3_600_000 < p["oldest_timestamp_ms"] <= time.time() * 1000  # produced by this session
    text = run(env, "describe", "orders")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("Topic: orders  Partitions: 2  Remote: ") and "PARTITION  REMOTE OFFSETS" in text.stdout, text.stdout
    row = next(line.split() for line in text.stdout.splitlines() if line.startswith("0 "))
    assert row[1] == f"0..{stack.registry.segments('orders', 0)[-1].last_offset}" and row[2] == f"{log_starts[0]}..{COUNT // PARTITIONS - 1}", text.stdout


def test_describe_names_a_recorded_gap_and_its_reason(retained: tuple[TieredStack, dict[int, int]], tmp_path: Path) -> None:
    stack, _ = retained
    lost = topic_with_a_lost_segment(stack, "cli-gappy", 400)
    env = user_env(tmp_path, **cli_exports(stack.gateway_url, stack.cluster, stack.bootstrap))
    done = run(env, "describe", "cli-gappy", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["partitions"][0]["gaps"] == [{"start_offset": lost.base_offset, "end_offset": lost.last_offset, "reason": "test: segment lost"}]
    text = run(env, "describe", "cli-gappy")
    assert f"gap: partition 0 offsets {lost.base_offset}..{lost.last_offset}: test: segment lost" in text.stdout, text.stdout


@pytest.mark.parametrize("with_kafka", [pytest.param(True, id="with-bootstrap-servers"), pytest.param(False, id="gateway-only")])
def test_describe_of_an_unknown_topic_exits_1_with_unknown_topic_or_part(retained: tuple[TieredStack, dict[int, int]], tmp_path: Path, with_kafka: bool) -> None:
    stack, _ = retained
    exports = cli_exports(stack.gateway_url, stack.cluster, stack.bootstrap)
    if not with_kafka:
        del exports["TIERED_KAFKA_BOOTSTRAP_SERVERS"]
    done = run(user_env(tmp_path, **exports), "describe", "no-such-topic", "--json")
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert "UNKNOWN_TOPIC_OR_PART" in done.stderr and "'no-such-topic'" in done.stderr, done.stderr


def test_a_topic_the_token_may_not_read_is_topic_authorization_failed_never_empty(retained: tuple[TieredStack, dict[int, int]], s3_server: Any, tmp_path: Path) -> None:
    """The token comes from the environment (TIERED_KAFKA_TOKEN) and from --token-file: never argv."""
    stack, _ = retained
    auth = {"enabled": True, "tokens": {READER: ["orders"], OUTSIDER: ["other-.*"]}}
    with gateway_server(stack.agent, s3_server, stack.bootstrap, auth=auth) as url:
        exports = cli_exports(url, stack.cluster, stack.bootstrap)
        for with_kafka in (True, False):
            env = user_env(tmp_path, **exports, TIERED_KAFKA_TOKEN=OUTSIDER)
            if not with_kafka:
                del env["TIERED_KAFKA_BOOTSTRAP_SERVERS"]
            done = run(env, "describe", "orders")
            assert (done.returncode, done.stdout) == (1, ""), done.stderr
            assert "TOPIC_AUTHORIZATION_FAILED" in done.stderr and "'orders'" in done.stderr and OUTSIDER not in done.stderr, done.stderr
        listed = run(user_env(tmp_path, **exports, TIERED_KAFKA_TOKEN=OUTSIDER), "topics", "--json")
        assert listed.returncode == 0, listed.stderr
        orders = next(t for t in json.loads(listed.stdout)["topics"] if t["name"] == "orders")  # Kafka lists it; remote storage refuses
        assert orders["remote_error"] == "TOPIC_AUTHORIZATION_FAILED" and orders["remote_bytes"] == 0
        token_file = tmp_path / "token"
        token_file.write_text(READER + "\n")
        token_file.chmod(0o600)
        allowed = run(user_env(tmp_path, **exports), "describe", "orders", "--json", "--token-file", str(token_file))
        assert allowed.returncode == 0 and "warning" not in allowed.stderr, allowed.stderr
        assert [p["partition"] for p in json.loads(allowed.stdout)["partitions"]] == [0, 1]
        refused = run(user_env(tmp_path, **exports), "describe", "orders")  # no token at all: 401, named
        assert refused.returncode == 1 and "401" in refused.stderr and "no gateway token was given" in refused.stderr, refused.stderr
