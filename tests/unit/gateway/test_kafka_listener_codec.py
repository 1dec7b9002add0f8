"""The Kafka listener's pure parts: the codec over Kafka's message JSON, request headers, and the start-up refusals."""

from __future__ import annotations

import struct

import pytest

from tiered_kafka.errors import ConfigError
from tiered_kafka_gateway.config import load_settings
from tiered_kafka_gateway.kafka_listener.codec import KafkaProtocolError, Writer, decode, encode, schema
from tiered_kafka_gateway.kafka_listener.fetch import cut_at
from tiered_kafka_gateway.kafka_listener.framing import API_VERSIONS, UnsupportedRequest, parse_header, request_frame, response_header
from tiered_kafka_gateway.kafka_listener.runner import check_listeners

FETCH = {"ReplicaId": -1, "MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": 1000, "IsolationLevel": 1, "SessionId": 0, "SessionEpoch": -1,
         "Topics": [{"Topic": "t", "TopicId": b"x" * 16, "Partitions": [{"Partition": 3, "FetchOffset": 5, "PartitionMaxBytes": 100, "CurrentLeaderEpoch": 2}]}],
         "ForgottenTopicsData": [], "RackId": "r"}


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_request_and_response_round_trip_every_version(version: int) -> None:
    written = encode("FetchRequest", version, FETCH)
    back, end = decode("FetchRequest", version, written.getvalue())
    assert end == written.size
    partition = back["Topics"][0]["Partitions"][0]
    assert (partition["Partition"], partition["FetchOffset"], partition["PartitionMaxBytes"]) == (3, 5, 100)
    assert back["Topics"][0]["Topic" if version < 13 else "TopicId"] == ("t" if version < 13 else b"x" * 16)
    response = {"Responses": [{"Topic": "t", "TopicId": b"x" * 16, "Partitions": [
        {"PartitionIndex": 3, "HighWatermark": 9, "LastStableOffset": 8, "LogStartOffset": 0, "AbortedTransactions": [{"ProducerId": 7, "FirstOffset": 2}],
         "Records": [b"abc", b"de"]}]}]}
    written = encode("FetchResponse", version, response)
    assert written.parts.count(b"abc") == 1  # the records' chunks are appended, not copied
    partition = decode("FetchResponse", version, written.getvalue())[0]["Responses"][0]["Partitions"][0]
    assert (partition["Records"], partition["HighWatermark"], partition["AbortedTransactions"]) == (b"abcde", 9, [{"ProducerId": 7, "FirstOffset": 2}])


def test_every_advertised_version_is_within_kafkas_json() -> None:
    for key, (name, low, high) in API_VERSIONS.items():
        for kind in ("Request", "Response"):
            found = schema(name + kind)
            assert found.api_key == key and low in found.valid and high in found.valid, (name, kind)


def test_request_header_and_the_unsupported() -> None:
    frame = request_frame(3, 12, 42, "client", encode("MetadataRequest", 12, {"Topics": None}))[4:]
    header = parse_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 12, 42, "client")
    assert decode("MetadataRequest", 12, frame, header.body_offset)[0]["Topics"] is None
    with pytest.raises(UnsupportedRequest) as refused:
        parse_header(struct.pack(">hhih", 18, 99, 7, -1))
    assert refused.value.header.correlation_id == 7
    with pytest.raises(UnsupportedRequest):
        parse_header(struct.pack(">hhih", 999, 0, 7, -1))
    with pytest.raises(KafkaProtocolError):
        decode("FetchRequest", 12, b"\x00\x01")
    assert response_header(18, 3, 5) == struct.pack(">i", 5)  # ApiVersions: header v0 always
    assert response_header(1, 12, 5) == struct.pack(">ib", 5, 0)


def test_an_array_longer_than_its_frame_is_refused_before_allocating() -> None:
    w = Writer()
    w.put(struct.pack(">i", 2**30))
    with pytest.raises(KafkaProtocolError):
        decode("MetadataRequest", 1, w.getvalue())


def test_cut_at_stops_before_the_first_batch_at_or_past_the_offset() -> None:
    batches = b"".join(struct.pack(">qi", base, 4) + b"body" for base in (10, 20, 30))
    assert cut_at(batches, 25) == batches[:32]
    assert cut_at(batches, 10) == b""
    assert cut_at(batches, 99) == batches


def test_a_listener_beyond_loopback_needs_authentication() -> None:
    cluster = {"redis_url": "redis://127.0.0.1:1", "s3": {"bucket": "b"}, "kafka_listener": {"port": 9093, "host": "0.0.0.0"}}
    with pytest.raises(ConfigError, match="refusing to listen on 0.0.0.0"):
        check_listeners(load_settings(clusters={"c": cluster}))
    check_listeners(load_settings(clusters={"c": cluster}, auth={"allow_anonymous": True}))
    secured = {**cluster, "bootstrap_servers": "k:9092", "kafka_security": {"security.protocol": "SASL_SSL"}}
    with pytest.raises(ConfigError, match="PLAINTEXT only"):
        check_listeners(load_settings(clusters={"c": secured}, auth={"allow_anonymous": True}))


def test_split_takes_whole_batches_within_the_limit_and_below_the_stop() -> None:
    from tests.support.batches import build_v2, sample_records
    from tiered_kafka_gateway.kafka_listener.read_ahead import ReadAhead, split

    batches = [build_v2(sample_records(10, value_size=100), base_offset=i * 10) for i in range(5)]
    data = memoryview(b"".join(batches))
    assert split(data, len(batches[0]) + 1) == (len(batches[0]), 10)
    assert split(data, 1) == (len(batches[0]), 10)  # at least one batch (KIP-74)
    assert split(data, 1 << 30, stop=30) == (sum(len(b) for b in batches[:3]), 30)
    assert split(data, 1 << 30, stop=0) == (0, -1)
    ahead = ReadAhead(capacity=2 * len(data))
    ahead.put("t", 0, 10, data[len(batches[0]):])
    assert ahead.take("t", 0, 11) is None and ahead.take("t", 0, 10) is not None and ahead.size == 0


def test_a_token_scope_narrows_group_requests() -> None:
    """groups.scoped: an OffsetCommit forwards only the topics the token may read, the others answered
    TOPIC_AUTHORIZATION_FAILED; an OffsetFetch's answer hides or refuses them; a KIP-848 subscription by name to
    one is refused without reaching Kafka; a token reading everything changes nothing."""
    import re

    from tiered_kafka_gateway.kafka_listener.groups import scoped
    from tiered_kafka_gateway.tokens import Access

    access = Access((re.compile("seen"),))

    def request(key: int, version: int, body: dict) -> tuple:
        frame = request_frame(key, version, 9, "c", encode({8: "OffsetCommit", 9: "OffsetFetch", 68: "ConsumerGroupHeartbeat"}[key] + "Request", version, body))[4:]
        return parse_header(frame), frame

    part = [{"PartitionIndex": 0, "CommittedOffset": 5}]
    header, frame = request(8, 8, {"GroupId": "g", "Topics": [{"Name": "seen", "Partitions": part}, {"Name": "hidden", "Partitions": part}]})
    body = decode("OffsetCommitRequest", 8, frame, header.body_offset)[0]
    assert scoped(header, frame, body, Access(None)).frame is frame
    scope = scoped(header, frame, body, access)
    assert parse_header(scope.frame).correlation_id == 9
    assert [t["Name"] for t in decode("OffsetCommitRequest", 8, scope.frame, header.body_offset)[0]["Topics"]] == ["seen"]
    fixed = scope.fix({"ThrottleTimeMs": 0, "Topics": [{"Name": "seen", "Partitions": [{"PartitionIndex": 0, "ErrorCode": 0}]}]})
    assert [(t["Name"], t["Partitions"][0]["ErrorCode"]) for t in fixed["Topics"]] == [("seen", 0), ("hidden", 29)]
    header, frame = request(8, 8, {"GroupId": "g", "Topics": [{"Name": "hidden", "Partitions": part}]})
    only_hidden = scoped(header, frame, decode("OffsetCommitRequest", 8, frame, header.body_offset)[0], access)
    assert only_hidden.frame is None and only_hidden.answer["Topics"][0]["Partitions"][0]["ErrorCode"] == 29

    answer = {"Groups": [{"GroupId": "g", "ErrorCode": 0, "Topics": [
        {"Name": n, "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 5, "CommittedLeaderEpoch": -1, "Metadata": "", "ErrorCode": 0}]}
        for n in ("seen", "hidden")]}]}
    for topics, expected in ((None, [("seen", 5, 0)]), ([{"Name": "seen", "PartitionIndexes": [0]}, {"Name": "hidden", "PartitionIndexes": [0]}],
                                                          [("seen", 5, 0), ("hidden", -1, 29)])):
        header, frame = request(9, 8, {"Groups": [{"GroupId": "g", "Topics": topics}]})
        scope = scoped(header, frame, decode("OffsetFetchRequest", 8, frame, header.body_offset)[0], access)
        shown = scope.fix(answer)["Groups"][0]["Topics"]
        assert [(t["Name"], t["Partitions"][0]["CommittedOffset"], t["Partitions"][0]["ErrorCode"]) for t in shown] == expected

    header, frame = request(68, 0, {"GroupId": "g", "MemberId": "m", "SubscribedTopicNames": ["seen", "hidden"], "TopicPartitions": []})
    refused = scoped(header, frame, decode("ConsumerGroupHeartbeatRequest", 0, frame, header.body_offset)[0], access)
    assert refused.frame is None and refused.answer["ErrorCode"] == 29


def test_a_group_outside_the_token_grant_is_refused_before_kafka() -> None:
    """groups.scoped / refused: each group request naming a group the grant does not name is answered
    GROUP_AUTHORIZATION_FAILED in its own shape (nothing forwarded); a named group goes through; auth off: all."""
    import re

    from tiered_kafka_gateway.kafka_listener.groups import scoped
    from tiered_kafka_gateway.tokens import Access

    access = Access((re.compile(".*"),), groups=(re.compile("team-a-.*"),))
    bodies = {
        8: ("OffsetCommit", 8, {"GroupId": "G", "Topics": [{"Name": "t", "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 5}]}]}),
        9: ("OffsetFetch", 8, {"Groups": [{"GroupId": "G", "Topics": None}]}),
        11: ("JoinGroup", 7, {"GroupId": "G", "ProtocolType": "consumer", "Protocols": []}),
        12: ("Heartbeat", 4, {"GroupId": "G", "GenerationId": 1, "MemberId": "m"}),
        13: ("LeaveGroup", 4, {"GroupId": "G", "Members": []}),
        14: ("SyncGroup", 5, {"GroupId": "G", "GenerationId": 1, "MemberId": "m", "Assignments": []}),
        68: ("ConsumerGroupHeartbeat", 0, {"GroupId": "G", "MemberId": "m", "MemberEpoch": 0}),
    }
    for key, (name, version, body) in bodies.items():
        for group, allowed in (("team-a-1", True), ("team-b-1", False)):
            named = {**body, "Groups": [{"GroupId": group, "Topics": None}]} if key == 9 else {**body, "GroupId": group}
            frame = request_frame(key, version, 3, "c", encode(name + "Request", version, named))[4:]
            header = parse_header(frame)
            decoded = decode(name + "Request", version, frame, header.body_offset)[0]
            assert scoped(header, frame, decoded, Access(None)).frame is frame
            scope = scoped(header, frame, decoded, access)
            if allowed:
                assert scope.frame is frame, name
                continue
            assert scope.frame is None, name
            answer = decode(name + "Response", version, encode(name + "Response", version, scope.answer).getvalue(), 0)[0]
            codes = ([p["ErrorCode"] for t in answer["Topics"] for p in t["Partitions"]] if key == 8 else
                     [g["ErrorCode"] for g in answer["Groups"]] if key == 9 else [answer["ErrorCode"]])
            assert codes == [30], (name, answer)
