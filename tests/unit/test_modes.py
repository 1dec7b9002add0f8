"""The consumption-mode rules."""

from __future__ import annotations

import pytest

from tiered_kafka.modes import Mode, Source, decide


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
