"""``hybrid_planning`` against a fake gateway (``test_planning.FakeGateway``) and a fake ``KafkaView``
(pure logic): timestamps, a high watermark that goes back, read_committed's handoff, recorded gaps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from tests.unit.spark.test_planning import FakeGateway
from tiered_kafka.errors import RemoteReadError
from tiered_kafka.client.gateway import PartitionExtent, RemoteExtent
from tiered_kafka.spark import hybrid_planning
from tiered_kafka.spark.hybrid import KafkaBounds
from tiered_kafka.spark.options import parse_options

TP = ("t", 0)


class Gateway(FakeGateway):
    def __init__(self, segments: list[tuple[int, int]], *, lso: int | None = None, missing: tuple[int, ...] = (), timestamps: dict[int, int | None] | None = None) -> None:
        super().__init__(segments, missing, timestamps)
        self.lso = lso

    def topics(self) -> dict[str, list[int]]:
        return {"t": [0]}

    def partition(self, topic: str, partition: int) -> PartitionExtent:
        first, last = self.segments[0][0], self.segments[-1][1]
        return PartitionExtent(RemoteExtent(first, last, len(self.segments), 100 * (last + 1 - first), self.lso), None, None)


class View:
    def __init__(self, log_start: int, end: int, timestamps: dict[int, int] | None = None) -> None:
        self.kafka = KafkaBounds(log_start, end)
        self.timestamps = timestamps or {}

    def partitions(self) -> dict[str, list[int]]:
        return {"t": [0]}

    def bounds(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], KafkaBounds]:
        return {tp: self.kafka for tp in partitions}

    def offsets_for_timestamp(self, timestamps: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int | None]:
        return {tp: self.timestamps.get(ts) for tp, ts in timestamps.items()}


def options(mode: str = "REMOTE_PREFERRED", **extra: str):  # type: ignore[no-untyped-def]
    return parse_options({"tiered.gateway.url": "http://gw", "tiered.cluster": "c", "assign": '{"t":[0]}', "tiered.mode": mode, "kafka.bootstrap.servers": "b", **extra})


@pytest.fixture
def view(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def install(v: View) -> View:
        monkeypatch.setattr(hybrid_planning, "kafka_view", lambda _options: v)
        return v

    return install


def test_a_timestamp_resolves_to_the_smaller_of_both_tiers_answers(view) -> None:  # type: ignore[no-untyped-def]
    """Remote retention shorter than Kafka's: remote storage answers its earliest (50), Kafka holds 20 with ts >= T."""
    view(View(10, 300, {5000: 20}))
    context = hybrid_planning.HybridContext(options(), Gateway([(50, 199)], timestamps={5000: 50}))  # type: ignore[arg-type]
    assert context.resolve(options(startingTimestamp="5000").starting, TP, [], starting=True) == 20


def test_a_high_watermark_that_goes_back_is_data_loss(view) -> None:  # type: ignore[no-untyped-def]
    """After an unclean election Kafka's end (40) is below the stream's position (100): reported, never hidden."""
    view(View(0, 40))
    gateway = Gateway([(0, 29)])
    latest, _earliest, _bounds = hybrid_planning.latest_offsets(options(), gateway, {TP: 100})  # type: ignore[arg-type]
    assert latest == {TP: 40}
    lost: list[str] = []
    assert hybrid_planning.plan_micro_batch(options(), gateway, {TP: 100}, latest, [], lost.append) == []  # type: ignore[arg-type]
    assert lost == ["t-0: offset went back from 100 to 40; some data may have been missed"]


def test_read_committed_unknown_remote_lso_fails_only_where_kafka_takes_over(view) -> None:  # type: ignore[no-untyped-def]
    view(View(0, 300))
    committed = {"kafka.isolation.level": "read_committed"}
    # KAFKA_PREFERRED with Kafka holding everything: no remote piece, no need of remote storage's LSO
    plan = hybrid_planning.plan_hybrid_source(options("KAFKA_PREFERRED", **committed), Gateway([(0, 199)]), [])  # type: ignore[arg-type]
    assert [(s.start, s.end) for t in plan.tasks for s in t.kafka_slices] == [(0, 300)] and not any(t.slices for t in plan.tasks)
    with pytest.raises(RemoteReadError, match=r"t-0: kafka.isolation.level=read_committed with tiered.mode=REMOTE_PREFERRED hands over to Kafka at remote storage's last stable offset, which is unknown"):
        hybrid_planning.plan_hybrid_source(options(**committed), Gateway([(0, 199)]), [])  # type: ignore[arg-type]


def test_read_committed_hands_over_at_the_remote_lso(view) -> None:  # type: ignore[no-untyped-def]
    view(View(0, 300))
    plan = hybrid_planning.plan_hybrid_source(options(**{"kafka.isolation.level": "read_committed"}), Gateway([(0, 199)], lso=150), [])  # type: ignore[arg-type]
    assert [(s.start, s.end, s.stable_end) for t in plan.tasks for s in t.slices] == [(0, 150, 150)]
    assert [(s.start, s.end) for t in plan.tasks for s in t.kafka_slices] == [(150, 300)]


def test_a_recorded_gap_partly_below_kafkas_log_start(view) -> None:  # type: ignore[no-untyped-def]
    """Gap 100..199, Kafka's log start 120, the read ends at 150: 100..119 lost (warned), Kafka reads 120..149
    (``modes.gap_kafka_rest``, as ``Handoff.gap``); the gateway clamps the gap to the read's end, so the
    lost piece never passes it."""
    view(View(120, 300))
    warnings: list[str] = []
    plan = hybrid_planning.plan_hybrid_source(options(endingOffsets='{"t":{"0":150}}', failOnDataLoss="false"), Gateway([(0, 99), (100, 199), (200, 299)], missing=(100,)), warnings)  # type: ignore[arg-type]
    assert any("t-0: offsets 100..119 are in a recorded gap of remote storage (segment lost) and no longer in Kafka" in w for w in warnings), warnings
    assert [(s.start, s.end) for t in plan.tasks for s in t.kafka_slices] == [(120, 150)]
    assert [(s.start, s.end) for t in plan.tasks for s in t.slices] == [(0, 150)]


def test_an_unknown_topic_is_in_neither_tier(view) -> None:  # type: ignore[no-untyped-def]
    from tiered_kafka.spark.options import OptionError

    view(View(0, 10))
    opts = parse_options({"tiered.gateway.url": "http://gw", "tiered.cluster": "c", "subscribe": "nope", "tiered.mode": "KAFKA_PREFERRED", "kafka.bootstrap.servers": "b"})
    with pytest.raises(OptionError, match=r"option 'subscribe': unknown topic\(s\) 'nope': neither Kafka nor the gateway \(cluster 'c'\) has them \(topics: "):
        hybrid_planning.HybridContext(opts, Gateway([(0, 9)]))  # type: ignore[arg-type]


def test_a_named_topic_the_token_may_not_read_is_an_error_not_a_kafka_only_read(view) -> None:  # type: ignore[no-untyped-def]
    """The gateway's listing hides topics the token may not read; Kafka lists them. A hybrid read of
    one raises TOPIC_AUTHORIZATION_FAILED (the modes rule: never a fallback to Kafka), as REMOTE_ONLY does."""
    from tiered_kafka.errors import TopicAuthorizationError

    class Forbidding(Gateway):
        def partition(self, topic: str, partition: int) -> PartitionExtent:
            if topic == "secret":
                raise TopicAuthorizationError("not authorized to read 'secret'", topic=topic)
            return super().partition(topic, partition)

    class KafkaHasIt(View):
        def partitions(self) -> dict[str, list[int]]:
            return {"t": [0], "secret": [0]}

    view(KafkaHasIt(0, 10))
    for selection in ({"subscribe": "secret"}, {"assign": '{"secret":[0]}'}):
        opts = parse_options({"tiered.gateway.url": "http://gw", "tiered.cluster": "c", "tiered.mode": "REMOTE_PREFERRED", "kafka.bootstrap.servers": "b", **selection})
        with pytest.raises(TopicAuthorizationError, match="secret"):
            hybrid_planning.HybridContext(opts, Forbidding([(0, 9)]))  # type: ignore[arg-type]


def test_a_micro_batch_reuses_the_bounds_latest_offsets_learned(view, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    view(View(0, 40))
    made: list[object] = []
    real = hybrid_planning.HybridContext

    class Counting(real):  # type: ignore[misc,valid-type]
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(hybrid_planning, "HybridContext", Counting)
    opts, gateway = options(), Gateway([(0, 29)])
    latest, _, bounds = hybrid_planning.latest_offsets(opts, gateway, {TP: 40})  # type: ignore[arg-type]
    hybrid_planning.plan_micro_batch(opts, gateway, {TP: 40}, latest, [], lambda m: None, bounds)  # type: ignore[arg-type]
    assert len(made) == 1
    hybrid_planning.plan_micro_batch(opts, gateway, {TP: 40}, latest, [], lambda m: None)  # type: ignore[arg-type]
    assert len(made) == 2  # no later one


def test_a_stream_planner_learns_both_tiers_bounds_once_per_call_it_serves(view, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """An AvailableNow start (initialOffset, then latestOffset with reuse) and the micro-batch right
    after share one learning of both tiers' bounds; the planner holds it, not a module global."""
    from tiered_kafka.spark.stream_planning import StreamPlanner, parse_stream_options

    view(View(0, 40))
    made: list[object] = []
    real = hybrid_planning.HybridContext

    class Counting(real):  # type: ignore[misc,valid-type]
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(hybrid_planning, "HybridContext", Counting)
    stream = parse_stream_options({"tiered.gateway.url": "http://gw", "tiered.cluster": "c", "assign": '{"t":[0]}', "tiered.mode": "REMOTE_PREFERRED",
                                   "kafka.bootstrap.servers": "b", "startingOffsets": "earliest"})
    planner = StreamPlanner(stream, Gateway([(0, 29)]))  # type: ignore[arg-type]
    start = planner.initial_offsets()
    latest, _ = planner.latest_offsets(start, reuse=True)
    assert len(made) == 1 and latest == {TP: 40}
    assert planner.plan_micro_batch(start, latest)
    assert len(made) == 1
    planner.plan_micro_batch(start, latest)
    assert len(made) == 2  # one learning serves one call, no later one


def test_remote_retention_moving_after_resolution_hands_the_offsets_to_kafka(view) -> None:  # type: ignore[no-untyped-def]
    """The extent said 0..99 when the read was resolved; remote retention then removed 0..49 (the
    gateway's plan answers OFFSET_OUT_OF_RANGE, earliest 50): Kafka, which still holds them, reads them."""
    from tiered_kafka.errors import OffsetNotRemoteError

    class Retained(Gateway):
        def plan(self, topic: str, partition: int, offset: int, max_bytes: int):  # type: ignore[no-untyped-def]
            if offset < 50:
                raise OffsetNotRemoteError("below", offset=offset, earliest=50, latest=99)
            return super().plan(topic, partition, offset, max_bytes)

    view(View(0, 200))
    plan = hybrid_planning.plan_hybrid_source(options(), Retained([(0, 49), (50, 99)]), [])  # type: ignore[arg-type]
    assert sorted((s.start, s.end) for t in plan.tasks for s in t.kafka_slices) == [(0, 50), (100, 200)]
    assert min(r.first_offset for t in plan.tasks for s in t.slices for _k, r in s.ranges) == 50
