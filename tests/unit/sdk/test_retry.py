"""The one retry policy (tiered_kafka.retry): attempts, full jitter, and the one list of transient errors
(pure logic; the sleeps are recorded, not slept)."""

from __future__ import annotations

from collections.abc import Iterator

import botocore.exceptions
import httpx
import pytest
import redis.exceptions
from boto3.exceptions import S3UploadFailedError

from tiered_kafka import retry
from tiered_kafka.errors import (
    CorruptRecordError,
    GatewayRequestError,
    PresignedUrlError,
    TopicAuthorizationError,
    TransientReadError,
)
from tiered_kafka.registry import MalformedRegistryDataError, RegistryUnavailableError
from tiered_kafka.retry import RetryPolicy, is_transient


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    asked: list[float] = []
    monkeypatch.setattr(retry, "_sleep", asked.append)
    yield asked


def s3_error(code: str, status: int) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


def upload_failed(cause: BaseException | None) -> S3UploadFailedError:
    """boto3's transfer manager's error, raised from ``cause`` (None: from nothing we can judge)."""
    err = S3UploadFailedError("failed")
    err.__cause__ = cause
    return err


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        # our own exceptions: their retriable flag
        (RegistryUnavailableError("x"), True), (MalformedRegistryDataError("x"), False), (CorruptRecordError("x", position=0), False),
        (GatewayRequestError("x", status=503, code="registry_unavailable"), True), (GatewayRequestError("x", status=500, code="internal_error"), False),
        (GatewayRequestError("x", status=502, code="corrupt_remote_data"), False), (TopicAuthorizationError("x", topic="t"), False),
        (PresignedUrlError("x"), False), (TransientReadError("x"), True),
        # Python's
        (ConnectionRefusedError(), True), (ConnectionResetError(), True), (TimeoutError(), True), (OSError("disk"), False), (ValueError(), False),
        # httpx
        (httpx.ConnectError("x"), True), (httpx.ReadTimeout("x"), True), (httpx.RemoteProtocolError("x"), True), (httpx.UnsupportedProtocol("x"), False),
        # redis-py: the registry's and the agent's lists, now one
        (redis.exceptions.ConnectionError(), True), (redis.exceptions.TimeoutError(), True), (redis.exceptions.BusyLoadingError(), True),
        (redis.exceptions.ClusterDownError("CLUSTERDOWN"), True), (redis.exceptions.TryAgainError(), True), (redis.exceptions.ReadOnlyError(), True),
        (redis.exceptions.ResponseError("WRONGTYPE"), False), (redis.exceptions.DataError(), False),
        # boto3 / botocore
        (s3_error("SlowDown", 503), True), (s3_error("InternalError", 500), True), (s3_error("AccessDenied", 403), False), (s3_error("PreconditionFailed", 412), False),
        (botocore.exceptions.EndpointConnectionError(endpoint_url="http://s3"), True), (botocore.exceptions.ReadTimeoutError(endpoint_url="http://s3"), True),
        (upload_failed(s3_error("SlowDown", 503)), True), (upload_failed(s3_error("AccessDenied", 403)), False), (upload_failed(None), True),
    ],
)  # fmt: skip
def test_the_one_list_of_transient_errors(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


def test_a_transient_failure_is_retried_until_it_succeeds(sleeps: list[float]) -> None:
    outcomes: list[BaseException | str] = [ConnectionResetError("reset"), RegistryUnavailableError("down"), "done"]
    retried: list[BaseException] = []

    def action() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    assert RetryPolicy(attempts=5, base_s=0.1, cap_s=1.0).call(action, what="x", on_retry=retried.append) == "done"
    assert [type(e) for e in retried] == [ConnectionResetError, RegistryUnavailableError]
    assert len(sleeps) == 2 and 0 <= sleeps[0] <= 0.1 and 0 <= sleeps[1] <= 0.2


def test_attempts_are_bounded_and_the_last_error_raised(sleeps: list[float]) -> None:
    calls: list[int] = []

    def action() -> None:
        calls.append(1)
        raise TimeoutError(f"attempt {len(calls)}")

    with pytest.raises(TimeoutError, match="attempt 3"):
        RetryPolicy(attempts=3, base_s=0.01).call(action, what="x")
    assert len(calls) == 3 and len(sleeps) == 2


def test_an_error_that_is_not_transient_is_raised_at_once(sleeps: list[float]) -> None:
    calls: list[int] = []

    def action() -> None:
        calls.append(1)
        raise MalformedRegistryDataError("bad field", key="k")

    with pytest.raises(MalformedRegistryDataError):
        RetryPolicy(attempts=8).call(action, what="x")
    assert calls == [1] and sleeps == []


def test_the_pause_given_replaces_the_sleep(sleeps: list[float]) -> None:
    paused: list[float] = []
    outcomes = iter([ConnectionError(), 7])

    def action() -> int:
        outcome = next(outcomes)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    assert RetryPolicy(attempts=2).call(action, what="x", pause=paused.append) == 7
    assert len(paused) == 1 and sleeps == []


def test_full_jitter_doubles_from_base_up_to_the_cap() -> None:
    policy = RetryPolicy(attempts=10, base_s=0.2, cap_s=1.0)
    assert [policy.delay(n, draw=lambda: 1.0) for n in range(1, 6)] == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0])
    assert policy.delay(3, draw=lambda: 0.0) == 0.0  # full jitter: anywhere from zero
    assert policy.delay(10**9, draw=lambda: 0.5) == 0.5  # no overflow for any failure count
    assert all(0 <= policy.delay(4) <= 1.0 for _ in range(100))


@pytest.mark.parametrize("bad", [{"attempts": 0}, {"base_s": -1.0}, {"cap_s": -0.1}])
def test_a_policy_that_cannot_run_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="retry policy"):
        RetryPolicy(**bad)  # type: ignore[arg-type]
