"""The time-ranges endpoint (``routes.time_ranges``) over segments the agent uploaded (real Redis,
SeaweedFS, agent): segments whose exact [min, max] record timestamps miss the range are pruned,
mid-partition too, and the answer is the pruned spans (what a reader may skip), never what is
kept; a record older than its batch's first sets its segment's minimum; an entry without an
exact minimum is kept and listed; offsets below the first registered segment are never in the
answer; a listed-only bucket prunes nothing; bounds before 1970 are signed; errors follow the
gateway's codes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.support.agent_env import agent_settings, checkpoint_high_watermarks, registry_for, wait_for
from tests.support.batches import Rec, build_v2
from tests.support.gateway_env import gateway_client, pinterest_bucket
from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration

TOPIC = "timed"
HOUR = 3_600_000
T0 = 1_700_000_000_000 // HOUR * HOUR
SEGMENTS = 5
OLD_ONE = T0 + 1 * HOUR + 5  # hour 1, inside a batch of segment 3 (hour 3), after its first record
READER, OUTSIDER = "r" * 24, "o" * 24


def write_partition(log_dir: Path) -> None:
    """Segment h holds 3 batches of 4 records stamped in hour h; segment 3's second batch (gzip)
    holds one record of hour 1 after its first record."""
    plog = PartitionLog.create(log_dir / f"{TOPIC}-0", LogConfig(segment_bytes=1 << 20, retention_ms=-1))
    for hour in range(SEGMENTS):
        for b in range(3):
            stamps = [T0 + hour * HOUR + 10 * b + i for i in range(4)]
            codec = 1 if (hour, b) == (3, 1) else 0
            if codec:
                stamps[2] = OLD_ONE
            plog.append(build_v2([Rec(b"k", b"v" * 200, t) for t in stamps], codec=codec))
        plog.roll()
    plog.close()


@pytest.fixture
def uploaded(tmp_path, redis_server, s3_server, s3_bucket):
    write_partition(tmp_path / "logs")
    checkpoint_high_watermarks(tmp_path / "logs")  # no broker: everything written is committed
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: len(registry.segments(TOPIC, 0)) == SEGMENTS, what="uploaded")
    return settings, registry


def hour_range(client, base: str, hour: int, **headers: str) -> dict:
    response = client.get(f"{base}/time-ranges", params={"from_timestamp": T0 + hour * HOUR, "to_timestamp": T0 + (hour + 1) * HOUR - 1}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def spans(body: dict, name: str = "pruned") -> list[tuple[int, int]]:
    return [(r["first_offset"], r["last_offset"]) for r in body[name]]


def test_segments_outside_the_range_are_pruned_and_an_older_record_in_a_batch_is_kept(uploaded, s3_server) -> None:
    settings, registry = uploaded
    entries = registry.segments(TOPIC, 0)
    assert all(e.min_timestamp_exact for e in entries)
    assert [e.min_timestamp for e in entries] == [T0, T0 + HOUR, T0 + 2 * HOUR, OLD_ONE, T0 + 4 * HOUR]  # not segment 3's first batch's base
    seg = [(e.base_offset, e.last_offset) for e in entries]
    client = gateway_client(settings, s3_server)
    base = f"/v1/clusters/{settings.cluster}/topics/{TOPIC}/partitions/0"

    one = hour_range(client, base, 1)  # segment 1 kept, and segment 3 for its old record; 0, 2 and 4 pruned
    assert spans(one) == [seg[0], seg[2], seg[4]] and one["inexact"] == [] and one["pruned_segments"] == 3
    assert [r["size"] for r in one["pruned"]] == [entries[0].size, entries[2].size, entries[4].size]
    assert one["pruned_bytes"] == entries[0].size + entries[2].size + entries[4].size and one["earliest_offset"] == seg[0][0]
    assert spans(hour_range(client, base, 4)) == [(seg[0][0], seg[3][1])]  # adjacent pruned segments: one run
    assert spans(hour_range(client, base, 2)) == [(seg[0][0], seg[1][1]), seg[4]]  # segment 3 spans hours 1 to 3
    assert spans(hour_range(client, base, 9)) == [(seg[0][0], seg[4][1])]  # known: no record of that hour is remote
    whole = client.get(f"{base}/time-ranges", params={"from_timestamp": 0, "to_timestamp": 2**63 - 1}).json()
    assert whole["pruned"] == [] and whole["pruned_segments"] == 0
    before_1970 = client.get(f"{base}/time-ranges", params={"from_timestamp": -(2**63), "to_timestamp": -3}).json()
    assert spans(before_1970) == [(seg[0][0], seg[4][1])]  # every segment's exact minimum is after 1970

    # an entry registered before exact minimums (its min is a batch base timestamp): kept, and said so
    old = registry.delete_segment(TOPIC, 0, entries[2].base_offset)
    assert old is not None
    registry.register(dataclasses.replace(old, min_timestamp_exact=False))
    zero = hour_range(client, base, 0)
    assert spans(zero) == [seg[1], (seg[3][0], seg[4][1])] and spans(zero, "inexact") == [seg[2]]

    # the first segment gone (retention since a reader resolved its offsets): the answer says nothing of
    # its offsets, so a reader subtracting the pruned spans reads them and meets out-of-range
    assert registry.delete_segment(TOPIC, 0, entries[0].base_offset) is not None
    late = hour_range(client, base, 1)
    assert spans(late) == [seg[4]] and late["earliest_offset"] == seg[1][0]

    # errors: the gateway's codes, never an empty answer for what is unknown
    for params, status, code in (
        ({"from_timestamp": 5, "to_timestamp": 4}, 422, "invalid_request"),
        ({"from_timestamp": 2**63, "to_timestamp": 2**63}, 422, "invalid_request"),
        ({"from_timestamp": 5}, 422, "invalid_request"),
    ):
        response = client.get(f"{base}/time-ranges", params=params)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), params
    unknown = client.get(f"/v1/clusters/{settings.cluster}/topics/nowhere/partitions/0/time-ranges", params={"from_timestamp": 0, "to_timestamp": 1})
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_topic_or_partition")
    guarded = gateway_client(settings, s3_server, auth={"enabled": True, "tokens": {READER: ["tim.*"], OUTSIDER: ["other"]}})
    assert spans(hour_range(guarded, base, 1, **{"X-API-Key": READER})) == [seg[4]]  # the inexact segment 2 kept
    denied = guarded.get(f"{base}/time-ranges", params={"from_timestamp": 0, "to_timestamp": 1}, headers={"X-API-Key": OUTSIDER})
    assert (denied.status_code, denied.json()["error"]["code"]) == (403, "topic_authorization_failed")


def test_a_bucket_without_a_registry_prunes_nothing_and_lists_its_whole_extent_as_inexact(redis_server, s3_server, s3_bucket) -> None:
    cluster = "pinterestTimes"
    last = pinterest_bucket(s3_server, s3_bucket, Keyspace("custom-prefix", cluster, 5), "test_topic_a")
    settings = agent_settings(Path("/nonexistent"), redis_server, s3_server, s3_bucket, cluster=cluster, s3={"prefix": "custom-prefix", "entropy_bits": 5})
    body = hour_range(gateway_client(settings, s3_server), f"/v1/clusters/{cluster}/topics/test_topic_a/partitions/0", 0)
    assert body["pruned"] == [] and spans(body, "inexact") == [(0, last)] and body["pruned_segments"] == 0 and body["earliest_offset"] is None
