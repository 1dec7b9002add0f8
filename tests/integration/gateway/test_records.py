"""Records as JSON over real Redis, SeaweedFS, the agent's uploads and Kafka (the session's shared broker)."""

from __future__ import annotations

import base64
import time
from typing import NamedTuple

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from fastapi.testclient import TestClient

from tests.support.agent_env import registry_for
from tests.support.gateway_env import gateway_client, unique_topic, uploaded_partition
from tests.support.transactions import BASE_TIMESTAMP, COMMITTED_OFFSETS, uploaded_transactional_log
from tiered_kafka_agent.config import AgentSettings

pytestmark = pytest.mark.integration

COUNT = 2000


class Served(NamedTuple):
    """A topic of its own on the shared broker, uploaded, and a gateway serving it."""

    topic: str
    bootstrap: str
    settings: AgentSettings
    client: TestClient
    latest: int  # the last offset in remote storage


@pytest.fixture
def served(kafka_server, tmp_path, redis_server, s3_server, s3_bucket) -> Served:
    topic = unique_topic("records")
    broker, settings = uploaded_partition(kafka_server, tmp_path, redis_server, s3_server, s3_bucket, topic, COUNT)
    latest = registry_for(settings).partition_info(topic, 0).latest_offset
    assert latest < COUNT - 1  # the active segment is hot only
    return Served(topic, broker.bootstrap_servers, settings, gateway_client(settings, s3_server, broker.bootstrap_servers), latest)


def url(settings, topic: str) -> str:
    return f"/v1/clusters/{settings.cluster}/topics/{topic}/partitions/0/records"


def kafka_read(bootstrap: str, topic: str, offset: int, count: int) -> list[dict]:
    """What confluent-kafka reads from the broker, in the gateway's base64 JSON shape."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reference", "enable.auto.commit": False, "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, 0, offset)])
    out: list[dict] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        for m in consumer.consume(count - len(out), 0.5):
            assert m.error() is None, m.error()
            ts_type, ts = m.timestamp()
            out.append(
                {
                    "offset": m.offset(),
                    "timestamp": ts,
                    "timestamp_type": {1: "CreateTime", 2: "LogAppendTime"}[ts_type],
                    "key": b64(m.key()),
                    "value": b64(m.value()),
                    "headers": [{"key": k, "value": b64(v)} for k, v in (m.headers() or [])],
                }
            )
    consumer.close()
    return out


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def test_remote_records_equal_what_kafka_returns(served) -> None:
    topic, bootstrap, settings, client, latest = served
    entries = registry_for(settings).segments(topic, 0)
    for offset in (0, 1, entries[1].base_offset, (entries[2].base_offset + entries[2].last_offset) // 2, latest - 3, latest):
        body = client.get(url(settings, topic), params={"offset": offset, "max_records": 40}).json()
        assert body["source"] == "remote", body
        records = body["records"]
        assert records and records[0]["offset"] == offset
        assert [r["offset"] for r in records] == list(range(offset, offset + len(records)))
        assert body["next_offset"] == offset + len(records)
        assert records == kafka_read(bootstrap, topic, offset, len(records))
        assert body["remote_latest_offset"] == latest


def test_hot_records_are_proxied_to_kafka_and_equal_what_kafka_returns(served) -> None:
    topic, bootstrap, settings, client, latest = served
    for offset in (latest + 1, COUNT - 5):
        body = client.get(url(settings, topic), params={"offset": offset, "max_records": 50}).json()
        assert body["source"] == "kafka", body
        expected = kafka_read(bootstrap, topic, offset, min(50, COUNT - offset))
        assert body["records"] == expected
        assert body["next_offset"] == expected[-1]["offset"] + 1
        assert (body["log_start_offset"], body["high_watermark"]) == (0, COUNT)
    # a read of the last records ends at the partition's end, without waiting out Kafka's fetch.max.wait.ms
    # (500 ms a Fetch at the end is held; kafka_offsets' module docstring): the quickest of five well below it
    durations = []
    for _ in range(5):
        started = time.monotonic()
        body = client.get(url(settings, topic), params={"offset": COUNT - 5, "max_records": 50}).json()
        durations.append(time.monotonic() - started)
        assert [r["offset"] for r in body["records"]] == list(range(COUNT - 5, COUNT)), body
    assert min(durations) < 0.45, durations
    at_end = client.get(url(settings, topic), params={"offset": COUNT}).json()
    assert (at_end["records"], at_end["next_offset"], at_end["source"]) == ([], COUNT, "kafka")
    past = client.get(url(settings, topic), params={"offset": COUNT + 10})
    assert (past.status_code, past.json()["error"]["code"]) == (416, "offset_out_of_range")


def test_remote_preferred_hands_off_to_kafka_at_the_exact_offset(served) -> None:
    topic, _, settings, client, latest = served
    offsets, sources, offset = [], set(), 0
    while offset < COUNT:
        body = client.get(url(settings, topic), params={"offset": offset, "max_records": 700}).json()
        assert body["records"], body
        sources.add((body["source"], body["records"][0]["offset"] <= latest))
        offsets += [r["offset"] for r in body["records"]]
        offset = body["next_offset"]
    assert offsets == list(range(COUNT))  # no gap, no duplicate
    assert sources == {("remote", True), ("kafka", False)}


def test_each_mode_follows_its_rule(served) -> None:
    topic, bootstrap, settings, client, latest = served
    hot = latest + 1

    def read(offset: int, mode: str):
        return client.get(url(settings, topic), params={"offset": offset, "mode": mode, "max_records": 20})

    assert read(5, "REMOTE_ONLY").json()["source"] == "remote"
    refused = read(hot, "REMOTE_ONLY")
    assert (refused.status_code, refused.json()["error"]["code"]) == (416, "offset_not_in_remote_storage")
    assert read(5, "KAFKA_ONLY").json()["source"] == "kafka"
    assert read(hot, "KAFKA_ONLY").json()["source"] == "kafka"
    assert read(5, "REMOTE_PREFERRED").json()["source"] == "remote"
    assert read(hot, "REMOTE_PREFERRED").json()["source"] == "kafka"
    from_kafka = read(5, "KAFKA_PREFERRED").json()
    assert from_kafka["source"] == "kafka"

    trimmed = latest - 10
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert next(iter(admin.delete_records([TopicPartition(topic, 0, trimmed)]).values())).result(timeout=10).low_watermark == trimmed

    fallback = read(5, "KAFKA_PREFERRED").json()
    assert fallback["source"] == "remote" and fallback["log_start_offset"] == trimmed
    assert fallback["records"] == from_kafka["records"]  # the same records, from remote storage
    assert read(trimmed, "KAFKA_PREFERRED").json()["source"] == "kafka"
    gone = read(5, "KAFKA_ONLY")
    assert (gone.status_code, gone.json()["error"]["code"]) == (416, "offset_out_of_range")
    assert gone.json()["error"]["log_start_offset"] == trimmed


def test_encodings_and_invalid_utf8(served) -> None:
    topic, bootstrap, settings, client, _ = served
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})  # both records in one batch
    producer.produce(topic, key="clé".encode(), value="välue ✓".encode(), partition=0, headers=[("h", "ü".encode()), ("empty", None)])
    producer.produce(topic, key=None, value=None, partition=0)
    assert producer.flush(30) == 0
    del producer
    body = client.get(url(settings, topic), params={"offset": COUNT, "encoding": "utf8"}).json()
    first, second = body["records"]
    assert (first["key"], first["value"], first["headers"]) == ("clé", "välue ✓", [{"key": "h", "value": "ü"}, {"key": "empty", "value": None}])
    assert (second["key"], second["value"], second["headers"]) == (None, None, [])
    as_b64 = client.get(url(settings, topic), params={"offset": COUNT, "encoding": "base64"}).json()["records"][0]
    assert base64.b64decode(as_b64["value"]) == "välue ✓".encode() and as_b64["headers"][0]["value"] == b64("ü".encode())

    remote_utf8 = client.get(url(settings, topic), params={"offset": 1, "max_records": 5, "encoding": "utf8"})
    assert remote_utf8.status_code == 422, remote_utf8.text  # offset 1 holds bytes 0x9e3779b1: not UTF-8
    error = remote_utf8.json()["error"]
    assert error["code"] == "invalid_request" and "offset 1 is not valid UTF-8; use encoding=base64" in error["message"] and error["offset"] == 1
    assert client.get(url(settings, topic), params={"offset": 0, "max_records": 1}).status_code == 200


def test_bad_parameters_are_422(served) -> None:
    topic, _, settings, client, _ = served
    for params in (
        {"offset": -1},
        {"offset": "x"},
        {},
        {"offset": 0, "max_records": 0},
        {"offset": 0, "max_records": 10_001},
        {"offset": 0, "max_bytes": 0},
        {"offset": 0, "max_bytes": 10**12},
        {"offset": 0, "encoding": "hex"},
        {"offset": 0, "mode": "remote_sometimes"},
        {"offset": 0, "isolation_level": "serializable"},
    ):
        response = client.get(url(settings, topic), params=params)
        assert (response.status_code, response.json()["error"]["code"]) == (422, "invalid_request"), params
    huge = 2**63 - 1  # valid, but beyond any offset the registry can hold: a 416, never a 5xx
    for mode, code in (("REMOTE_ONLY", "offset_not_in_remote_storage"), ("KAFKA_ONLY", "offset_out_of_range"), ("REMOTE_PREFERRED", "offset_out_of_range")):
        response = client.get(url(settings, topic), params={"offset": huge, "mode": mode})
        assert (response.status_code, response.json()["error"]["code"]) == (416, code), mode
    unknown = client.get(f"/v1/clusters/{settings.cluster}/topics/nope/partitions/0/records", params={"offset": 0, "mode": "REMOTE_ONLY"})
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_topic_or_partition")


# -- transactions (a log built by hand with the format core: tests.support.transactions) ------


def test_read_committed_leaves_out_aborted_transactions(tmp_path, redis_server, s3_server, s3_bucket) -> None:
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    assert [s.files[:4] for s in registry.segments("txn", 0)] == [("log", "index", "timeindex", "txnindex")] * 2
    client = gateway_client(settings, s3_server)

    def read(offset: int, level: str, **params) -> dict:
        response = client.get(url(settings, "txn"), params={"offset": offset, "isolation_level": level, **params})
        assert response.status_code == 200, response.text
        return response.json()

    everything = read(0, "read_uncommitted")
    # the read goes on into the next segment; control records are never returned
    assert [r["offset"] for r in everything["records"]] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 15, 16, 17, 19, 20, 21]
    assert everything["next_offset"] == 22
    first = everything["records"][0]
    assert first == {
        "offset": 0,
        "timestamp": 1_700_000_000_000,
        "timestamp_type": "CreateTime",
        "key": b64(b"plain-k0"),
        "value": b64(b"plain-v0"),
        "headers": [{"key": "h", "value": b64(b"plain0")}],
    }
    committed = read(0, "read_committed", encoding="utf8")
    # p7 committed, p8 aborted (marker and .txnindex in segment 0), p9 aborted (in segment 14),
    # p10 aborted; p11's COMMIT is not in remote storage yet: the read stops before it (like the LSO)
    assert [r["offset"] for r in committed["records"]] == [0, 1, 2, 3, 4, 8, 13, 17]
    assert [r["value"] for r in committed["records"]] == ["plain-v0", "plain-v1", "p7-v0", "p7-v1", "p7-v2", "p7b-v0", "tail-v0", "mid-v0"]
    assert committed["next_offset"] == 19
    one_segment = read(0, "read_committed", max_bytes=1, max_records=100)  # a window within segment 0
    assert [r["offset"] for r in one_segment["records"]][:2] == [0, 1]
    second = read(14, "read_committed")
    assert [r["offset"] for r in second["records"]] == [17] and second["next_offset"] == 19
    assert [r["offset"] for r in read(14, "read_uncommitted")["records"]] == [15, 16, 17, 19, 20, 21]
    assert read(19, "read_committed")["records"] == [] and read(19, "read_committed")["next_offset"] == 19
    # a window holding only p9's batch looks ahead for its marker (ABORT, in the next segment): the
    # records are left out and the read moves past them (undecided, next_offset would stay at 11)
    small = read(11, "read_committed", max_bytes=1)
    assert small["records"] == [] and small["next_offset"] == 13
    assert [r["offset"] for r in read(11, "read_uncommitted", max_bytes=1)["records"]] == [11, 12]
    assert [r["offset"] for r in read(0, "read_committed", max_records=4)["records"]] == [0, 1, 2, 3]


def test_read_committed_pages_deliver_the_reference_from_every_offset(tmp_path, redis_server, s3_server, s3_bucket) -> None:
    """Paging one batch at a time from each offset gives what the rule gives on the whole log."""
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    client = gateway_client(settings, s3_server)
    for start in range(22):
        offsets, offset = [], start
        while True:
            body = client.get(url(settings, "txn"), params={"offset": offset, "isolation_level": "read_committed", "max_bytes": 1}).json()
            offsets += [r["offset"] for r in body["records"]]
            if body["next_offset"] in (offset, 22):
                break
            offset = body["next_offset"]
        # p11 (19-20) is still open at the end of remote data: the reads stop at the remote LSO, 19,
        # also a read from 21, past it (the producer snapshot at 22 says p11 is open since 19)
        assert (offsets, body["next_offset"]) == ([o for o in COMMITTED_OFFSETS if o >= start], max(start, 19)), start


def test_offsets_for_timestamp_under_read_committed(tmp_path, redis_server, s3_server, s3_bucket) -> None:
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    client = gateway_client(settings, s3_server)

    def offset_for(offset_timestamp: int, level: str | None) -> int | None:
        params = {"timestamp": BASE_TIMESTAMP + offset_timestamp} | ({} if level is None else {"isolation_level": level})
        response = client.get(f"/v1/clusters/{settings.cluster}/topics/txn/partitions/0/offsets", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["record_timestamp"] == (None if body["offset"] is None else BASE_TIMESTAMP + body["offset"])
        return body["offset"]

    # each record's timestamp is BASE_TIMESTAMP + its offset; control records (9, 10, 14, 18) are never answered
    expected_uncommitted = {0: 0, 2: 2, 5: 5, 9: 11, 11: 11, 12: 12, 14: 15, 19: 19, 20: 20, 21: 21, 22: None}
    for ts, offset in expected_uncommitted.items():
        assert offset_for(ts, None) == offset_for(ts, "read_uncommitted") == offset, ts
    # read_committed: an aborted record is answered, as Kafka does (5: p8 aborted in the same segment;
    # 11: p9, whose ABORT marker is in the next segment); p11 is undecided in remote storage: no answer
    expected_committed = expected_uncommitted | {19: None, 20: None, 21: None}  # 21: past the remote LSO, 19
    for ts, offset in expected_committed.items():
        assert offset_for(ts, "read_committed") == offset, ts
    bad = client.get(f"/v1/clusters/{settings.cluster}/topics/txn/partitions/0/offsets", params={"timestamp": 0, "isolation_level": "snapshot"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_request")


def test_read_committed_transaction_open_at_the_end_and_aborted_across_segments(tmp_path, redis_server, s3_server, s3_bucket) -> None:
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    client = gateway_client(settings, s3_server)

    def read(offset: int, **params) -> dict:
        response = client.get(url(settings, "txn"), params={"offset": offset, "isolation_level": "read_committed", **params})
        assert response.status_code == 200, response.text
        return response.json()

    # p9's records (11-12, segment 0) are dropped from a window of segment 0 only: its .txnindex
    # entry and marker are in segment 14, found by reading ahead
    window = read(11, max_bytes=1, max_records=1)
    assert (window["records"], window["next_offset"]) == ([], 13)
    assert [r["offset"] for r in read(13, max_bytes=1)["records"]] == [13]
    # p11 stays open at the end of remote data: nothing at or after 19 from a read that sees it
    tail = read(15)
    assert ([r["offset"] for r in tail["records"]], tail["next_offset"], tail["remote_latest_offset"]) == ([17], 19, 21)
    assert tail["last_stable_offset"] == 19  # the response says where and why it stopped
    assert (read(19)["records"], read(20)["next_offset"]) == ([], 20)
    # held at the offset asked: never a bare empty answer. REMOTE_ONLY, and REMOTE_PREFERRED with no
    # Kafka to ask, name the first held offset (19; from 20: the remote LSO, below the offset)
    for mode in ("REMOTE_ONLY", "REMOTE_PREFERRED"):
        for offset in (19, 20):
            body = read(offset, mode=mode)
            assert (body["source"], body["records"], body["next_offset"], body["last_stable_offset"]) == ("remote", [], offset, 19), (mode, offset)
    assert read(0, max_records=2)["last_stable_offset"] is None  # stopped by max_records, not held
    uncommitted = client.get(url(settings, "txn"), params={"offset": 19}).json()
    assert uncommitted["last_stable_offset"] is None and [r["offset"] for r in uncommitted["records"]] == [19, 20, 21]
