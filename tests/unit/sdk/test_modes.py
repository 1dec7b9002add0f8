"""The consumption-mode rules."""

from __future__ import annotations

import pytest

from tiered_kafka.modes import Action, Mode, Source, at_gap, at_remote_end, below_remote_start, decide, kafka_out_of_range, on_authorization_failed, switch_back_at


@pytest.mark.parametrize(
    ("mode", "remote_holds", "kafka", "below_start", "expected"),
    [
        pytest.param(Mode.REMOTE_ONLY, False, True, False, Source.REMOTE, id="remote-only-never-kafka"),
        pytest.param(Mode.KAFKA_ONLY, True, True, False, Source.KAFKA, id="kafka-only"),
        pytest.param(Mode.REMOTE_PREFERRED, True, True, False, Source.REMOTE, id="remote-preferred-remote"),
        pytest.param(Mode.REMOTE_PREFERRED, False, True, False, Source.KAFKA, id="remote-preferred-hot"),
        pytest.param(Mode.REMOTE_PREFERRED, False, False, False, Source.REMOTE, id="remote-preferred-no-kafka"),
        pytest.param(Mode.KAFKA_PREFERRED, True, True, False, Source.KAFKA, id="kafka-preferred"),
        pytest.param(Mode.KAFKA_PREFERRED, True, True, True, Source.REMOTE, id="kafka-preferred-below-log-start"),
    ],
)
def test_decide(mode: Mode, remote_holds: bool, kafka: bool, below_start: bool, expected: Source) -> None:
    assert decide(mode, remote_holds=lambda: remote_holds, kafka_configured=kafka, kafka_below_log_start=below_start) is expected


def test_remote_is_asked_only_when_it_matters() -> None:
    asked = []
    decide(Mode.KAFKA_ONLY, remote_holds=lambda: asked.append(1) or True, kafka_configured=True)
    decide(Mode.REMOTE_ONLY, remote_holds=lambda: asked.append(1) or True, kafka_configured=True)
    assert asked == []


@pytest.mark.parametrize(
    ("mode", "offset", "kafka_log_start", "expected"),
    [
        pytest.param(Mode.REMOTE_ONLY, 5, None, Action.RESET, id="remote-only-resets"),
        pytest.param(Mode.REMOTE_PREFERRED, 5, None, Action.READ_KAFKA, id="kafka-may-hold-it"),
        pytest.param(Mode.KAFKA_PREFERRED, 5, 9, Action.RESET, id="kafka-refused-it-already"),
    ],
)
def test_below_remote_start(mode: Mode, offset: int, kafka_log_start: int | None, expected: Action) -> None:
    assert below_remote_start(mode, offset, kafka_log_start) is expected


@pytest.mark.parametrize(
    ("mode", "offset", "log_start", "remote", "expected"),
    [
        pytest.param(Mode.KAFKA_PREFERRED, 3, 10, (0, 20), Action.READ_REMOTE, id="remote-holds-it"),
        pytest.param(Mode.REMOTE_PREFERRED, 3, 10, (0, 5), Action.READ_REMOTE, id="remote-preferred-too"),
        pytest.param(Mode.KAFKA_PREFERRED, 7, 10, (0, 5), Action.GAP, id="between-tiers"),
        pytest.param(Mode.KAFKA_PREFERRED, 3, 10, (5, 20), Action.RESET, id="below-every-tier"),
        pytest.param(Mode.KAFKA_PREFERRED, 3, 10, None, Action.RESET, id="nothing-remote"),
        pytest.param(Mode.KAFKA_ONLY, 3, 10, (0, 20), Action.RESET, id="kafka-only-resets"),
        pytest.param(Mode.KAFKA_PREFERRED, 30, 10, (0, 20), Action.RESET, id="past-the-end"),
    ],
)
def test_kafka_out_of_range(mode: Mode, offset: int, log_start: int, remote: tuple[int, int] | None, expected: Action) -> None:
    assert kafka_out_of_range(mode, offset, log_start, remote) is expected


def test_gaps_ends_and_authorization() -> None:
    assert at_gap(Mode.REMOTE_ONLY, 5, 5, 8, None) is Action.GAP
    assert at_gap(Mode.REMOTE_PREFERRED, 5, 5, 8, None) is Action.READ_KAFKA  # Kafka may hold it
    assert at_gap(Mode.KAFKA_PREFERRED, 5, 5, 8, 7) is Action.GAP  # Kafka starts inside the gap
    assert at_remote_end(Mode.REMOTE_ONLY) is Action.WAIT and at_remote_end(Mode.KAFKA_PREFERRED) is Action.READ_KAFKA
    assert switch_back_at(Mode.KAFKA_PREFERRED, 10) == 10 and switch_back_at(Mode.REMOTE_PREFERRED, 10) is None
    assert {on_authorization_failed(m) for m in Mode} == {Action.FAIL}


def test_gap_kafka_rest() -> None:
    from tiered_kafka.modes import gap_kafka_rest

    assert gap_kafka_rest(Mode.REMOTE_PREFERRED, 10, 30, 20) == 20  # Kafka's log start inside the gap: it holds 20..30
    assert gap_kafka_rest(Mode.KAFKA_PREFERRED, 10, 30, 31) is None  # wholly below Kafka's log start
    assert gap_kafka_rest(Mode.REMOTE_PREFERRED, 10, 30, None) is None
    assert gap_kafka_rest(Mode.REMOTE_PREFERRED, 20, 30, 20) is None  # at the log start: at_gap reads Kafka
    assert gap_kafka_rest(Mode.REMOTE_ONLY, 10, 30, 20) is None


def test_earliest() -> None:
    from tiered_kafka.modes import earliest

    assert earliest(Mode.REMOTE_PREFERRED, 10, 20) == 10
    assert earliest(Mode.KAFKA_PREFERRED, 10, 0) == 0
    assert earliest(Mode.REMOTE_ONLY, 0, 20) == 20
    assert earliest(Mode.KAFKA_ONLY, 10, 0) == 10
    assert earliest(Mode.REMOTE_PREFERRED, 10, None) == 10
    assert earliest(Mode.REMOTE_ONLY, 10, None) is None
