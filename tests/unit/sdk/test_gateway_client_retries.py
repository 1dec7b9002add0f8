"""The gateway client's retry rule (pure logic: httpx.MockTransport, no sleeping for real).

Every gateway call is an idempotent GET: a connection refused, reset or closed before the answer,
a timeout, and a 429/502/503/504 (the gateway's, or a load balancer's with no live replica) are
sent again with bounded, jittered backoff; a 500, a 502 ``corrupt_remote_data``, every 4xx and a
request that cannot be sent at all are raised at once. The policy is ``tiered_kafka.retry``'s (its
own tests: tests/unit/sdk/test_retry.py), the rule for answers ``tiered_kafka.errors.transient_answer``;
``gateway_client`` re-exports the latter (and ``gateway_plan``'s names) for its many importers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from tiered_kafka import errors, retry
from tiered_kafka.client import gateway as gateway_client, plan as gateway_plan
from tiered_kafka.errors import GatewayRequestError, RemoteReadError, transient_answer
from tiered_kafka.client.gateway import MAX_BACKOFF_S, GatewayClient
from tiered_kafka.retry import is_transient

TOPICS = {"topics": [{"name": "t", "partitions": [0]}]}


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The backoff sleeps asked, recorded instead of slept."""
    asked: list[float] = []
    monkeypatch.setattr(retry, "_sleep", asked.append)  # not time.sleep: other threads of the session sleep too
    yield asked


def scripted(*answers: Callable[[httpx.Request], httpx.Response]) -> tuple[GatewayClient, list[httpx.Request]]:
    """A client whose n-th request gets ``answers[n]`` (the last one repeats)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[min(len(seen), len(answers)) - 1](request)

    return GatewayClient("http://lb", "c1", retries=3, backoff_s=0.1, transport=httpx.MockTransport(handler)), seen


def ok(_request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=TOPICS)


def raising(error: type[httpx.TransportError]) -> Callable[[httpx.Request], httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        raise error("boom", request=request)

    return answer


def status(code: int, body: str = "<html>no server is available</html>") -> Callable[[httpx.Request], httpx.Response]:
    return lambda _request: httpx.Response(code, text=body)


@pytest.mark.parametrize(
    ("status_code", "code", "transient"),
    [
        (502, None, True), (503, None, True), (504, None, True), (429, None, True),  # a load balancer's pages, rate limits
        (503, "registry_unavailable", True), (503, "storage_unavailable", True), (503, "kafka_unavailable", True),
        (502, "corrupt_remote_data", False), (500, "internal_error", False), (500, None, False), (501, None, False),
        (400, "invalid_request", False), (401, "unauthorized", False), (403, "topic_authorization_failed", False),
        (404, "unknown_topic_or_partition", False), (416, "offset_out_of_range", False),
    ],
)  # fmt: skip
def test_which_answers_are_transient(status_code: int, code: str | None, transient: bool) -> None:
    assert transient_answer(status_code, code) is transient


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (httpx.ConnectError, True), (httpx.ReadError, True), (httpx.WriteError, True), (httpx.RemoteProtocolError, True),
        (httpx.ReadTimeout, True), (httpx.ConnectTimeout, True), (httpx.PoolTimeout, True),
        (httpx.UnsupportedProtocol, False), (httpx.ProxyError, False),
    ],
)  # fmt: skip
def test_which_transport_failures_are_transient(error: type[httpx.TransportError], transient: bool) -> None:
    assert is_transient(error("x")) is transient


@pytest.mark.parametrize("failure", [raising(httpx.ReadError), raising(httpx.RemoteProtocolError), raising(httpx.ConnectError), status(502), status(503), status(504)])
def test_a_transient_failure_is_retried_and_the_answer_returned(failure: Callable[[httpx.Request], httpx.Response], sleeps: list[float]) -> None:
    client, seen = scripted(failure, failure, ok)
    assert client.topics() == {"t": [0]}
    assert len(seen) == 3 and len(sleeps) == 2
    assert all(r.method == "GET" and r.url == seen[0].url for r in seen)  # the same idempotent request again


def test_retries_are_bounded_then_the_last_error_is_raised(sleeps: list[float]) -> None:
    client, seen = scripted(status(504, "gateway timeout"))
    with pytest.raises(RemoteReadError, match="failed after 4 attempts: gateway answered 504"):
        client.topics()
    assert len(seen) == 4 and len(sleeps) == 3
    assert all(0 <= s <= 0.1 * 2**i for i, s in enumerate(sleeps))  # full jitter below base * 2**(failures - 1)


@pytest.mark.parametrize("failure", [status(500, '{"error": {"code": "internal_error", "message": "bug"}}'), status(501)])
def test_a_500_is_raised_at_once(failure: Callable[[httpx.Request], httpx.Response], sleeps: list[float]) -> None:
    client, seen = scripted(failure, ok)
    with pytest.raises(GatewayRequestError):
        client.topics()
    assert len(seen) == 1 and sleeps == []


def test_a_request_that_cannot_be_sent_is_not_retried(sleeps: list[float]) -> None:
    client, seen = scripted(raising(httpx.UnsupportedProtocol), ok)
    with pytest.raises(RemoteReadError, match="failed: boom"):
        client.topics()
    assert len(seen) == 1 and sleeps == []


def test_the_client_policy_is_retries_plus_one_attempts_capped_at_max_backoff() -> None:
    client = GatewayClient("http://gw", "c1", retries=3, backoff_s=0.1)
    try:
        assert (client.retry.attempts, client.retry.base_s, client.retry.cap_s) == (4, 0.1, MAX_BACKOFF_S)
        assert client.retry.delay(10_000, draw=lambda: 0.999999) == pytest.approx(MAX_BACKOFF_S, rel=1e-5)
    finally:
        client.close()


def test_a_presigned_get_answered_503_is_retried_then_named(sleeps: list[float]) -> None:
    plan_range = gateway_plan.PlannedRange(start=0, end=10, first_offset=0, last_offset=1, url="http://s3/b/k?X-Amz-Signature=secret", range_header="bytes=0-9")
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503, text="<Error><Message>slow down</Message></Error>")

    with GatewayClient("http://gw", "c1", retries=2, backoff_s=0.1, transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(RemoteReadError, match="failed after 3 attempts: S3 answered 503") as raised:
            client.fetch(plan_range)
    assert len(seen) == 3 and len(sleeps) == 2 and "secret" not in str(raised.value)


def test_the_split_out_names_stay_importable_from_gateway_client() -> None:
    """``from tiered_kafka.client.gateway import coalesce_ranges`` (and the rest) keeps working: the
    very objects of ``gateway_plan`` and ``errors``, listed in ``gateway_client.__all__``."""
    moved = {
        gateway_plan: ["ChunkedRange", "PlannedRange", "PlanGap", "Plan", "MIN_RANGE_BYTES", "coalesce_ranges", "read_gap"],
        errors: ["TRANSIENT_STATUSES", "transient_answer"],
    }
    for module, names in moved.items():
        for name in names:
            assert getattr(gateway_client, name) is getattr(module, name), name
            assert name in gateway_client.__all__, name
    assert all(hasattr(gateway_client, name) for name in gateway_client.__all__)
