"""The gateway client's mapping of HTTP answers to exceptions (pure logic: httpx.MockTransport).

Never silently empty: only a 416, or a 404 ``unknown_topic_or_partition`` to ``/plan``, may mean
"nothing remote"; authorization and authentication failures are raised at once, never retried.
A presigned ranged GET must come back 206 with the asked ``Content-Range``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from tiered_kafka.errors import GatewayRequestError, OffsetNotRemoteError, RemoteReadError, TopicAuthorizationError
from tiered_kafka.client.gateway import GatewayClient, PlannedRange, object_url

SIGNED = "https://s3.example/bucket/seg/00000000000000000000.log?X-Amz-Signature=SECRETSIG&X-Amz-Credential=AKIDSECRET"
PLANNED = PlannedRange(start=100, end=110, first_offset=5, last_offset=9, url=SIGNED, range_header="bytes=100-109")


class Recorder:
    """A MockTransport handler answering ``answer(request)`` and counting the requests."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)


def client(answer: Callable[[httpx.Request], httpx.Response], token: str | None = "t" * 24) -> tuple[GatewayClient, Recorder]:
    recorder = Recorder(answer)
    return GatewayClient("http://gw", "c1", token=token, retries=3, backoff_s=0.001, transport=httpx.MockTransport(recorder)), recorder


def envelope(status: int, code: str, message: str = "m", **details: object) -> Callable[[httpx.Request], httpx.Response]:
    return lambda _request: httpx.Response(status, json={"error": {"code": code, "message": message, **details}})


@pytest.mark.parametrize("call", ["plan", "partition", "offset_for_timestamp"])
def test_a_403_topic_authorization_failed_raises_at_once_on_every_call(call: str) -> None:
    gateway, recorder = client(envelope(403, "topic_authorization_failed", "not authorized to read topic 'secret'", topic="secret"))
    with pytest.raises(TopicAuthorizationError) as raised:
        {"plan": lambda: gateway.plan("secret", 0, 0, 1000), "partition": lambda: gateway.partition("secret", 0), "offset_for_timestamp": lambda: gateway.offset_for_timestamp("secret", 0, 5)}[call]()
    assert len(recorder.requests) == 1  # never retried
    err = raised.value
    assert err.topic == "secret" and err.status == 403 and err.code == "topic_authorization_failed" and not err.retriable
    assert "TOPIC_AUTHORIZATION_FAILED" in str(err) and err.KAFKA_ERROR_CODE == 29
    assert not isinstance(err, OffsetNotRemoteError)


def test_the_topic_of_a_403_comes_from_the_path_when_the_details_lack_it() -> None:
    gateway, _ = client(envelope(403, "topic_authorization_failed"))
    with pytest.raises(TopicAuthorizationError) as raised:
        gateway.plan("my.topic", 3, 0, 1000)
    assert raised.value.topic == "my.topic"


@pytest.mark.parametrize("token", ["t" * 24, None])
def test_a_401_names_the_token_problem_and_is_not_retried(token: str | None) -> None:
    gateway, recorder = client(envelope(401, "unauthorized", "a valid bearer token or X-API-Key is required"), token=token)
    with pytest.raises(GatewayRequestError) as raised:
        gateway.plan("orders", 0, 0, 1000)
    assert len(recorder.requests) == 1 and raised.value.status == 401 and not raised.value.retriable
    assert ("was not accepted" if token else "no gateway token was given") in str(raised.value)
    assert "t" * 24 not in str(raised.value)  # the token itself is never in a message


def test_a_404_unknown_partition_is_nothing_remote_only_for_a_plan() -> None:
    gateway, _ = client(envelope(404, "unknown_topic_or_partition", "no remote data for orders-0"))
    with pytest.raises(OffsetNotRemoteError) as raised:
        gateway.plan("orders", 0, 7, 1000)
    assert raised.value.offset == 7 and raised.value.latest is None and raised.value.past_the_end
    with pytest.raises(GatewayRequestError) as other:
        gateway.partition("orders", 0)
    assert other.value.code == "unknown_topic_or_partition" and not isinstance(other.value, OffsetNotRemoteError)


@pytest.mark.parametrize(("status", "code"), [(404, "unknown_cluster"), (403, "forbidden"), (400, "invalid_request"), (404, "not_found")])
def test_other_client_errors_are_never_nothing_remote(status: int, code: str) -> None:
    gateway, recorder = client(envelope(status, code))
    with pytest.raises(GatewayRequestError) as raised:
        gateway.plan("orders", 0, 0, 1000)
    assert not isinstance(raised.value, (OffsetNotRemoteError, TopicAuthorizationError))
    assert raised.value.code == code and len(recorder.requests) == 1


@pytest.mark.parametrize(("status", "code"), [(500, "internal_error"), (502, "corrupt_remote_data")])
def test_errors_trying_again_cannot_fix_are_raised_at_once_and_a_503_is_retried(status: int, code: str) -> None:
    gateway, recorder = client(envelope(status, code, "unexpected; id abc123", id="abc123"))
    with pytest.raises(GatewayRequestError) as raised:
        gateway.topics()
    assert raised.value.code == code and len(recorder.requests) == 1
    gateway, recorder = client(envelope(503, "storage_unavailable"))
    with pytest.raises(RemoteReadError, match="after 4 attempts"):
        gateway.topics()
    assert len(recorder.requests) == 4


def test_a_416_carries_the_remote_range() -> None:
    gateway, _ = client(envelope(416, "offset_not_in_remote_storage", "past the end", earliest_offset=3, latest_offset=40))
    with pytest.raises(OffsetNotRemoteError) as raised:
        gateway.plan("orders", 0, 41, 1000)
    assert (raised.value.offset, raised.value.earliest, raised.value.latest) == (41, 3, 40)


# -- presigned ranged GETs ---------------------------------------------------------------------------
class Body(httpx.SyncByteStream):
    """A response body that records whether it was read."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.read = False

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.read = True
        yield self.data


def test_a_range_answered_200_is_refused_before_its_body_is_read() -> None:
    whole = Body(b"x" * 5000)
    gateway, recorder = client(lambda _r: httpx.Response(200, headers={"Content-Length": "5000"}, stream=whole))
    with pytest.raises(RemoteReadError) as raised:
        gateway.fetch(PLANNED)
    message = str(raised.value)
    assert "200 instead of 206" in message and "ignored the Range" in message
    assert "https://s3.example/bucket/seg/00000000000000000000.log" in message
    assert "SECRETSIG" not in message and "AKIDSECRET" not in message and ".log?" not in message
    assert not whole.read and len(recorder.requests) == 1  # not buffered, not retried
    assert recorder.requests[0].headers["Range"] == "bytes=100-109" and "Authorization" not in recorder.requests[0].headers


@pytest.mark.parametrize("content_range", [None, "bytes 0-9/5000", "bytes 100-119/5000", "bytes */5000"])
def test_a_206_with_another_content_range_is_refused(content_range: str | None) -> None:
    headers = {} if content_range is None else {"Content-Range": content_range}
    gateway, _ = client(lambda _r: httpx.Response(206, headers=headers, content=b"y" * 10))
    with pytest.raises(RemoteReadError, match="Content-Range") as raised:
        gateway.fetch(PLANNED)
    assert "SECRETSIG" not in str(raised.value)


def test_a_206_of_the_range_asked_is_returned() -> None:
    gateway, _ = client(lambda _r: httpx.Response(206, headers={"Content-Range": "bytes 100-109/5000"}, content=b"0123456789"))
    assert gateway.fetch(PLANNED) == b"0123456789"


def test_a_short_206_body_is_retried_then_fails_without_the_signature() -> None:
    gateway, recorder = client(lambda _r: httpx.Response(206, headers={"Content-Range": "bytes 100-109/5000"}, content=b"short"))
    with pytest.raises(RemoteReadError, match="after 4 attempts") as raised:
        gateway.fetch(PLANNED)
    assert len(recorder.requests) == 4 and "SECRETSIG" not in str(raised.value)


def test_object_url_drops_the_query_string() -> None:
    assert object_url(SIGNED) == "https://s3.example/bucket/seg/00000000000000000000.log"
    assert json.dumps(object_url("http://h:9/b/k")) == '"http://h:9/b/k"'
