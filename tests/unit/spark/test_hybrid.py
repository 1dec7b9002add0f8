"""Hybrid modes of the Spark source, pure logic: options, ``hybrid.split`` (TieredConsumer's
``Handoff`` driven over both tiers' bounds), Kafka slices."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered_kafka.consumer.handoff import Handoff, ReadFrom
from tiered_kafka.modes import Mode, Source
from tiered_kafka.spark.hybrid import Piece, earliest_of, KafkaBounds, kafka_slices, split
from tiered_kafka.spark.kafka_options import DEFAULT_POLL_TIMEOUT_MS
from tiered_kafka.spark.options import OptionError, parse_options
from tiered_kafka.spark.planning import KafkaSlice

BASE = {"tiered.gateway.url": "http://gw:8080", "tiered.cluster": "prod", "subscribe": "t"}
R, K = Mode.REMOTE_PREFERRED, Mode.KAFKA_PREFERRED


def test_hybrid_options() -> None:
    options = parse_options({**BASE, "tiered.mode": "remote_preferred", "kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "PLAINTEXT", "kafka.isolation.level": "read_committed"})
    assert options.mode is R and options.read_committed
    assert options.kafka_config == (("bootstrap.servers", "b:9092"), ("security.protocol", "PLAINTEXT"))
    assert options.poll_timeout_ms == DEFAULT_POLL_TIMEOUT_MS
    assert parse_options({**BASE, "tiered.mode": "KAFKA_PREFERRED", "kafka.bootstrap.servers": "b", "kafkaConsumer.pollTimeoutMs": "500"}).poll_timeout_ms == 500
    remote_only = parse_options({**BASE, "kafka.bootstrap.servers": "b:9092"})
    assert remote_only.mode is Mode.REMOTE_ONLY and remote_only.kafka_config == ()


def test_group_id_options() -> None:
    """kafka.group.id as given, else <groupIdPrefix>-<uuid>, unique per query (Spark 3's options)."""
    hybrid = {**BASE, "tiered.mode": "REMOTE_PREFERRED", "kafka.bootstrap.servers": "b"}
    assert parse_options({**hybrid, "kafka.group.id": "allowed-group"}).kafka_group_id == "allowed-group"
    assert "group.id" not in dict(parse_options({**hybrid, "kafka.group.id": "allowed-group"}).kafka_config)
    first, second = parse_options(hybrid).kafka_group_id, parse_options(hybrid).kafka_group_id
    assert first.startswith("tiered-kafka-spark-") and second.startswith("tiered-kafka-spark-") and first != second
    assert parse_options({**hybrid, "groupIdPrefix": "team-a"}).kafka_group_id.startswith("team-a-")


def test_secrets_are_not_in_reprs() -> None:
    from tiered_kafka.spark.planning import ReadTask

    options = parse_options({**BASE, "tiered.gateway.token": "TOKEN-SECRET", "tiered.mode": "KAFKA_PREFERRED", "kafka.bootstrap.servers": "b", "kafka.sasl.password": "SASL-SECRET"})
    task = ReadTask.of(options, 0, (), (KafkaSlice("t", 0, 0, 5),))
    assert task.token == "TOKEN-SECRET" and dict(task.kafka_config)["sasl.password"] == "SASL-SECRET"
    for text in (repr(options), repr(task)):
        assert "SECRET" not in text
    assert task.mode is K and task.fail_on_data_loss and task.kafka_group_id == options.kafka_group_id


def test_librdkafka_refusal_is_an_option_error() -> None:
    from confluent_kafka import Consumer

    from tiered_kafka.spark.kafka_options import kafka_client

    with pytest.raises(OptionError, match=r"option 'kafka.no.such.setting': librdkafka refused it"):
        kafka_client(Consumer, {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "no.such.setting": "1"})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tiered.mode": "REMOTE_PREFERRED"}, r"option 'kafka.bootstrap.servers' is required with tiered.mode=REMOTE_PREFERRED"),
        ({"tiered.mode": "KAFKA_PREFERRED", "kafka.bootstrap.servers": " "}, r"option 'kafka.bootstrap.servers' is required with tiered.mode=KAFKA_PREFERRED"),
        ({"tiered.mode": "KAFKA_ONLY"}, r"'KAFKA_ONLY' is not supported by the tiered-kafka Spark source: use Spark's format"),
        ({"tiered.mode": "FASTEST"}, r"option 'tiered.mode' must be one of REMOTE_ONLY, KAFKA_ONLY, REMOTE_PREFERRED, KAFKA_PREFERRED, got 'FASTEST'"),
        ({"tiered.mode": "REMOTE_PREFERRED", "kafka.bootstrap.servers": "b", "kafka.enable.partition.eof": "false"}, r"option 'kafka.enable.partition.eof' is not supported"),
        ({"tiered.mode": "REMOTE_PREFERRED", "kafka.bootstrap.servers": "b", "kafka.auto.offset.reset": "earliest"}, r"option 'kafka.auto.offset.reset' is not supported"),
        ({"tiered.mode": "REMOTE_PREFERRED", "kafka.bootstrap.servers": "b", "kafka.sasl.jaas.config": "x"}, r"option 'kafka.sasl.jaas.config' is a Java client setting .*use kafka.sasl.username"),
        ({"tiered.mode": "REMOTE_PREFERRED", "kafka.bootstrap.servers": "b", "kafka.ssl.truststore.location": "/t.jks"}, r"option 'kafka.ssl.truststore.location' is a Java client setting .*ssl.ca.location"),
        ({"tiered.mode": "REMOTE_PREFERRED", "kafka.bootstrap.servers": "b", "kafkaConsumer.pollTimeoutMs": "-1"}, r"option 'kafkaConsumer.pollTimeoutMs' must be a positive"),
    ],
)
def test_bad_hybrid_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_options({**BASE, **options})


@pytest.mark.parametrize(
    ("mode", "remote", "log_start", "expected"),
    [
        # history in remote storage, then Kafka's tail at remote storage's end
        (R, (0, 60), 10, [Piece(Source.REMOTE, 0, 60), Piece(Source.KAFKA, 60, 100)]),
        # Kafka from its log start, remote storage below it (switch_back_at)
        (K, (0, 60), 10, [Piece(Source.REMOTE, 0, 10), Piece(Source.KAFKA, 10, 100)]),
        # remote storage ends below Kafka's log start: a gap between the tiers
        (R, (0, 60), 80, [Piece(Source.REMOTE, 0, 60), Piece(None, 60, 80, "between tiers: remote storage ends below Kafka's log start"), Piece(Source.KAFKA, 80, 100)]),
        (K, (0, 60), 80, [Piece(Source.REMOTE, 0, 60), Piece(None, 60, 80, "between tiers: remote storage ends below Kafka's log start"), Piece(Source.KAFKA, 80, 100)]),
        # below both starts: lost, then the first tier that holds the offsets
        (R, (20, 60), 30, [Piece(None, 0, 20, "not in remote storage nor in Kafka (retention)"), Piece(Source.REMOTE, 20, 60), Piece(Source.KAFKA, 60, 100)]),
        (R, (20, 60), 10, [Piece(None, 0, 10, "not in remote storage nor in Kafka (retention)"), Piece(Source.KAFKA, 10, 100)]),
        (K, None, 30, [Piece(None, 0, 30, "not in remote storage nor in Kafka (retention)"), Piece(Source.KAFKA, 30, 100)]),
        (R, None, 0, [Piece(Source.KAFKA, 0, 100)]),
        (K, (0, 60), 0, [Piece(Source.KAFKA, 0, 100)]),
    ],
)
def test_split(mode: Mode, remote: tuple[int, int] | None, log_start: int, expected: list[Piece]) -> None:
    assert split(mode, 0, 100, remote, log_start) == expected


@pytest.mark.parametrize(
    ("mode", "remote", "log_start", "stable", "expected"),
    [
        # read_committed, remote LSO 50 < Kafka's log start 80 <= remote end 100: remote storage holds
        # [50, 80) (Handoff: remote_end(held=50) → Kafka refuses 50 → READ_REMOTE), never "between tiers"
        (R, (0, 100), 80, 50, [Piece(Source.REMOTE, 0, 100), Piece(Source.KAFKA, 100, 150)]),
        (K, (0, 100), 80, 50, [Piece(Source.REMOTE, 0, 80), Piece(Source.KAFKA, 80, 150)]),
        # the LSO above Kafka's log start: Kafka takes over at the held point
        (R, (0, 100), 30, 60, [Piece(Source.REMOTE, 0, 60), Piece(Source.KAFKA, 60, 150)]),
        # remote storage really ends below Kafka's log start: a gap between the tiers
        (R, (0, 50), 80, 40, [Piece(Source.REMOTE, 0, 50), Piece(None, 50, 80, "between tiers: remote storage ends below Kafka's log start"), Piece(Source.KAFKA, 80, 150)]),
    ],
)
def test_split_read_committed(mode: Mode, remote: tuple[int, int], log_start: int, stable: int, expected: list[Piece]) -> None:
    assert split(mode, 0, 150, remote, log_start, stable) == expected


def test_split_refuses_other_modes() -> None:
    with pytest.raises(ValueError, match="split is for the hybrid modes, not REMOTE_ONLY"):
        split(Mode.REMOTE_ONLY, 0, 1, None, 0)


@given(
    mode=st.sampled_from([R, K]),
    start=st.integers(0, 60),
    length=st.integers(0, 60),
    remote=st.none() | st.tuples(st.integers(0, 80), st.integers(0, 80)),
    log_start=st.integers(0, 100),
    stable=st.none() | st.integers(0, 80),
)
def test_split_covers_the_range_from_the_tiers_that_hold_it(mode: Mode, start: int, length: int, remote: tuple[int, int] | None, log_start: int, stable: int | None) -> None:
    """``split`` is ``Handoff`` driven over the two tiers (``hybrid.split``): every offset once, in
    contiguous non-empty pieces; a remote piece inside what remote storage holds, a Kafka piece at
    or after Kafka's log start and last (once on Kafka a read stays there), a lost piece in no tier;
    KAFKA_PREFERRED reads remote storage only below Kafka's log start."""
    end = start + length
    stable = None if stable is None or remote is None or stable >= remote[1] else stable  # HybridContext.stable
    pieces = split(mode, start, end, remote, log_start, stable)
    held = remote if remote is not None and remote[0] < remote[1] else None
    assert [o for p in pieces for o in range(p.start, p.end)] == list(range(start, end))
    assert all(p.start < p.end for p in pieces)
    for i, piece in enumerate(pieces):
        if piece.source is Source.REMOTE:
            assert held is not None and held[0] <= piece.start and piece.end <= held[1]
            assert mode is R or piece.end <= log_start
        elif piece.source is Source.KAFKA:
            assert piece.start >= log_start and i == len(pieces) - 1
        else:
            assert piece.end <= log_start and (held is None or piece.end <= held[0] or piece.start >= held[1]), piece


def test_split_drives_the_handoff() -> None:
    """The one implementation: the pieces are what ``Handoff`` decides (a KAFKA_PREFERRED handoff
    that Kafka refused below its log start reads remote storage up to it, then Kafka)."""
    handoff = Handoff(K, kafka_configured=True, gap_skip=True)
    assert handoff.start(0, lambda: True) == ReadFrom(Source.KAFKA, 0)
    assert handoff.kafka_out_of_range(0, 10, (0, 59)) == ReadFrom(Source.REMOTE, 0)
    assert handoff.delivered(Source.REMOTE, 10) == ReadFrom(Source.KAFKA, 10)
    assert split(K, 0, 100, (0, 60), 10) == [Piece(Source.REMOTE, 0, 10), Piece(Source.KAFKA, 10, 100)]


def test_kafka_slices_and_earliest() -> None:
    assert kafka_slices("t", 1, 5, 12, per_slice=4) == [KafkaSlice("t", 1, 5, 9), KafkaSlice("t", 1, 9, 12)]
    assert kafka_slices("t", 1, 5, 5) == []
    assert earliest_of(R, (20, 60), KafkaBounds(10, 90)) == 10
    assert earliest_of(K, (0, 60), KafkaBounds(10, 90)) == 0
    assert earliest_of(K, None, KafkaBounds(10, 90)) == 10


def test_lost_piece_follows_fail_on_data_loss() -> None:
    from tiered_kafka.errors import RemoteGapError
    from tiered_kafka.spark.hybrid import lost_piece

    piece = Piece(None, 60, 80, "between tiers: remote storage ends below Kafka's log start")
    strict = parse_options({**BASE, "tiered.mode": "REMOTE_PREFERRED", "kafka.bootstrap.servers": "b"})
    with pytest.raises(RemoteGapError, match=r"t-0: offsets 60..79 are between tiers: remote storage ends below Kafka's log start; set failOnDataLoss=false"):
        lost_piece(strict, ("t", 0), piece, [])
    lenient = parse_options({**BASE, "tiered.mode": "REMOTE_PREFERRED", "kafka.bootstrap.servers": "b", "failOnDataLoss": "false"})
    warnings: list[str] = []
    lost_piece(lenient, ("t", 0), piece, warnings)
    assert warnings == ["t-0: offsets 60..79 are between tiers: remote storage ends below Kafka's log start; skipped (failOnDataLoss=false)"]


class FakeMessage:
    """The accessors of a confluent-kafka Message that ``kafka_reading`` uses."""

    def __init__(self, offset: int, kind: int, ts: int, headers: list[tuple[str, bytes | None]] | None) -> None:
        self._offset, self._kind, self._ts, self._headers = offset, kind, ts, headers

    def key(self) -> bytes:
        return f"k{self._offset}".encode()

    def value(self) -> bytes | None:
        return None if self._offset == 1 else b"v"

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return self._kind, self._ts

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers


@pytest.mark.parametrize("include_headers", [False, True])
def test_kafka_rows_have_the_remote_rows_schema(include_headers: bool) -> None:
    from tiered_kafka.spark.arrow import arrow_schema
    from tiered_kafka.spark.kafka_reading import _Rows, consumer_config
    from tiered_kafka.spark.planning import ReadTask

    piece = KafkaSlice("t", 3, 0, 3)
    task = ReadTask(0, "http://gw", "c", None, include_headers, False, (), read_committed=True, kafka_slices=(piece,), kafka_config=(("bootstrap.servers", "b"),))
    config = consumer_config(task)
    assert config["isolation.level"] == "read_committed" and config["auto.offset.reset"] == "error" and config["enable.auto.commit"] is False
    rows = _Rows(piece, task)
    rows.add(FakeMessage(0, 1, 1_700_000_000_123, [("h", b"x"), ("n", None)]))  # CreateTime
    rows.add(FakeMessage(1, 2, 1_700_000_000_124, None))  # LogAppendTime, a null value
    rows.add(FakeMessage(2, 0, -1, []))  # no timestamp (magic 0)
    batch = rows.batch()
    assert batch.schema == arrow_schema(include_headers)
    data = batch.to_pydict()
    assert data["offset"] == [0, 1, 2] and data["partition"] == [3, 3, 3] and data["topic"] == ["t"] * 3
    assert data["value"] == [b"v", None, b"v"] and data["timestampType"] == [0, 1, -1]
    assert [None if t is None else int(t.timestamp() * 1000) for t in data["timestamp"]] == [1_700_000_000_123, 1_700_000_000_124, None]
    if include_headers:
        assert data["headers"] == [[{"key": "h", "value": b"x"}, {"key": "n", "value": None}], [], []]
    assert rows.offsets == []  # flushed


@pytest.mark.parametrize(
    ("mode", "log_start", "end", "expected"),
    [
        # Kafka holds the whole gap 10..19: it reads it
        (R, 0, 100, [Piece(Source.KAFKA, 10, 20)]),
        (K, 10, 100, [Piece(Source.KAFKA, 10, 20)]),
        # Kafka's log start inside the gap: the part below it is lost, Kafka reads the rest
        (R, 15, 100, [Piece(None, 10, 15, "in a recorded gap of remote storage (lost) and no longer in Kafka"), Piece(Source.KAFKA, 15, 20)]),
        (K, 12, 15, [Piece(None, 10, 12, "in a recorded gap of remote storage (lost) and no longer in Kafka"), Piece(Source.KAFKA, 12, 15)]),
        # the gap wholly below Kafka's log start: REMOTE_ONLY's handling
        (R, 20, 100, None),
        (K, 30, 100, None),
    ],
)
def test_gap_pieces_follow_the_handoff(mode: Mode, log_start: int, end: int, expected: list[Piece] | None) -> None:
    """A recorded gap 10..19 in a remote piece ending at ``end``: Kafka's and lost pieces as ``Handoff.gap`` decides them."""
    from tiered_kafka.spark.hybrid import gap_pieces

    assert gap_pieces(mode, 10, 19, end, log_start, "lost") == expected
