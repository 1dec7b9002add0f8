"""The gateway's v1 API as clients see it, and the presigned ranged GETs its read plans hand out.

Used by ``TieredConsumer``, the ``tiered-kafka`` CLI and the PySpark data source (whose executors
need nothing else to read remote data). The JSON shapes are those of ``openapi/openapi.json``
(the gateway's ``models.py``); every field read here is validated, so a malformed answer is a
``GatewayRequestError`` naming the field, never a ``KeyError`` deep inside a read.

Two HTTP connection pools (httpx, keep-alive):
  * the gateway's, which sends the caller's token (``Authorization: Bearer``);
  * S3's, for presigned URLs, which sends *no* credentials: the URL is the credential. Its only
    extra header is the ``Range`` the URL was signed with (the read-plan contract).

Retries: every gateway call is an idempotent GET, and every one, like every presigned GET, goes
through ``tiered_kafka.retry.RetryPolicy`` (``retries`` + 1 attempts, full-jitter backoff from
``backoff_s`` capped at ``MAX_BACKOFF_S``; ``_with_retries``), which sends again what
``tiered_kafka.retry.is_transient`` calls transient: a connection refused, reset or closed before
the answer (a replica killed mid-request behind a load balancer), a timeout, and a
``GatewayRequestError`` whose answer ``tiered_kafka.errors.transient_answer`` calls transient (429,
502, 503, 504, from the gateway or a load balancer with no live replica, unless its code is one
trying again cannot fix). Presigned S3 GETs follow S3's rule instead: any 5xx, 429, or a short
body is a ``TransientReadError``, retried alike. When the attempts are spent, or a request cannot
be sent at all (e.g. an unsupported URL scheme), the error is raised as ``RemoteReadError`` naming
the request; a 500 (``internal_error``: a bug) and every 4xx answer are raised at once as mapped
below. (The gateway's own signed byte-range URLs, for encrypted KIP-405
segments, answer errors in its JSON envelope: ``_range_endpoint_error``.) A 403 from S3 (the URL
expired) or a 404 (remote retention removed the object after it was planned) is
``PresignedUrlError``: the caller re-plans and tries once more; a re-plan of an offset no longer
remote raises ``OffsetNotRemoteError``.

Never silently empty: the gateway's errors map to exceptions as follows, and only the first two
ever mean "remote storage holds nothing here":
  * 416 ``offset_out_of_range`` / ``offset_not_in_remote_storage`` -> ``OffsetNotRemoteError``
    (with the remote range from the error's details);
  * 404 ``unknown_topic_or_partition`` answered to ``/plan`` -> ``OffsetNotRemoteError`` with no
    range: the partition has no remote data at all (it is true there: access control answers
    403, so a 404 no longer hides an unreadable topic). Elsewhere that 404 is a
    ``GatewayRequestError`` whose ``code`` the caller may test;
  * 403 ``topic_authorization_failed`` -> ``TopicAuthorizationError`` (Kafka's
    TOPIC_AUTHORIZATION_FAILED), never retried;
  * 401 ``unauthorized`` -> ``GatewayRequestError`` naming the token problem, never retried;
  * anything else -> ``GatewayRequestError`` (status, code, message).

A presigned ranged GET must be answered 206 Partial Content with a ``Content-Range`` equal to the
range asked (RFC 9110, section 14.4): a 200 means the server or a proxy ignored the ``Range`` and is
sending the whole object, which is refused before its body is read (``RemoteReadError``). Messages
name the object by its URL without the query string: a presigned query string is a credential and
is never logged.

Re-exported, so that ``from tiered_kafka.client.gateway import ...`` keeps working for them:
``ChunkedRange``, ``PlannedRange``, ``PlanGap``, ``Plan``, ``MIN_RANGE_BYTES``, ``coalesce_ranges``
and ``read_gap`` (from ``gateway_plan``: a plan's data types and range math); ``TRANSIENT_STATUSES`` and
``transient_answer`` (from ``tiered_kafka.errors``: which answers are retried).
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit

import httpx

from tiered_kafka.errors import (
    TRANSIENT_STATUSES,
    ConfigError,
    GatewayRequestError,
    OffsetNotRemoteError,
    PresignedUrlError,
    RemoteReadError,
    TopicAuthorizationError,
    TransientReadError,
    transient_answer,
)
from tiered_kafka.client.plan import MIN_RANGE_BYTES, ChunkedRange, Plan, PlanGap, PlannedRange, coalesce_ranges, read_gap
from tiered_kafka.client.http import StdlibTransport, read_body
from tiered_kafka.retry import RetryPolicy, is_transient
from tiered_kafka.topic_names import topic_name_problem

__all__ = [
    "MAX_BACKOFF_S",
    "MIN_RANGE_BYTES",
    "TRANSIENT_STATUSES",
    "ChunkedRange",
    "GatewayClient",
    "PartitionExtent",
    "Plan",
    "PlanGap",
    "PlannedRange",
    "RemoteExtent",
    "check_content_range",
    "coalesce_ranges",
    "object_url",
    "read_gap",
    "transient_answer",
]

T = TypeVar("T")

MAX_BACKOFF_S = 5.0
"""The longest sleep between two attempts (the retry policy's cap)."""


@dataclass(frozen=True, slots=True)
class RemoteExtent:
    """Remote storage's extent. ``last_stable_offset``: the remote LSO
    (``tiered_kafka.transactions.remote_last_stable_offset``), None when unknown; read_committed
    reads of remote data deliver nothing at or past it."""

    earliest_offset: int
    latest_offset: int
    segment_count: int
    total_bytes: int
    last_stable_offset: int | None = None

    def holds(self, offset: int) -> bool:
        return self.earliest_offset <= offset <= self.latest_offset


@dataclass(frozen=True, slots=True)
class TopicListing:
    """The cluster's topics with remote data (``TopicList`` of the API): topic -> partitions, and
    whether the listing is whole (``complete`` false: the gateway's S3 listing stopped at its bound,
    topics may be missing)."""

    topics: dict[str, list[int]]
    complete: bool


@dataclass(frozen=True, slots=True)
class PartitionExtent:
    """What remote storage and Kafka hold of a partition (``PartitionDetail``): also where remote
    coverage starts (offsets below it were never uploaded) and the recorded gaps, with their reasons."""

    remote: RemoteExtent | None
    kafka_log_start_offset: int | None
    kafka_high_watermark: int | None
    coverage_start_offset: int | None = None
    gaps: tuple[PlanGap, ...] = ()


class GatewayClient:
    """A thread-safe client of one cluster on one gateway (``base_url``, e.g. ``http://gw:8080``)."""

    def __init__(
        self,
        base_url: str,
        cluster: str,
        *,
        token: str | None = None,
        timeout_s: float = 10.0,
        retries: int = 5,
        backoff_s: float = 0.1,
        max_connections: int = 16,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``transport`` replaces both pools' network transport (``httpx.MockTransport`` in unit tests).
        By default presigned GETs of ``http://`` URLs go through ``http_transport.StdlibTransport``
        (a body in one read: a third of httpx's CPU per byte), the gateway API through httpx's own."""
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"gateway URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.cluster = cluster
        self.retries = retries
        self.backoff_s = backoff_s
        self.retry = RetryPolicy(attempts=retries + 1, base_s=backoff_s, cap_s=MAX_BACKOFF_S, log_level=logging.DEBUG)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.has_token = bool(token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        tls = _tls_context()  # one per process: httpx builds one per client and transport otherwise (~15 ms of CPU each)
        self._api = httpx.Client(base_url=f"{self.base_url}/v1/clusters/{quote(cluster, safe='')}", headers=headers, timeout=timeout_s, limits=limits, transport=transport, verify=tls)
        self._direct = StdlibTransport(httpx.HTTPTransport(limits=limits, verify=tls)) if transport is None else None
        self._timeout_s = timeout_s
        self._s3 = httpx.Client(timeout=timeout_s, limits=limits, verify=tls, transport=transport if transport is not None else self._direct)

    def close(self) -> None:
        self._api.close()
        self._s3.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- gateway API ------------------------------------------------------------------------
    def topics(self) -> dict[str, list[int]]:
        """Topic -> partitions with remote data (``topic_listing`` also says whether the list is whole)."""
        return self._listing(with_complete=False).topics

    def topic_listing(self) -> TopicListing:
        return self._listing(with_complete=True)

    def _listing(self, *, with_complete: bool) -> TopicListing:
        """Every page of the gateway's listing (it is paged: ``next_after`` is the next page's cursor)."""
        topics: dict[str, list[int]] = {}
        complete = True
        after: str | None = None
        while True:
            body = self._get_json("/topics", params=None if after is None else {"after": after})
            for name, partitions in _topic_map(body).items():
                topics.setdefault(name, []).extend(partitions)
            if with_complete:
                complete = complete and _field(body, "complete", bool)
            after = body.get("next_after")
            if not isinstance(after, str):
                return TopicListing(topics, complete)

    def partition(self, topic: str, partition: int) -> PartitionExtent:
        body = self._get_json(_partition_path(topic, partition))
        remote = body.get("remote")
        kafka = body.get("kafka")
        return PartitionExtent(
            remote=None if remote is None else RemoteExtent(
                earliest_offset=_field(remote, "earliest_offset", int),
                latest_offset=_field(remote, "latest_offset", int),
                segment_count=_field(remote, "segment_count", int),
                total_bytes=_field(remote, "total_bytes", int),
                last_stable_offset=_optional_int(remote.get("last_stable_offset"), "last_stable_offset"),
            ),
            kafka_log_start_offset=None if kafka is None else _field(kafka, "log_start_offset", int),
            kafka_high_watermark=None if kafka is None else _field(kafka, "high_watermark", int),
            coverage_start_offset=_optional_int(body.get("coverage_start_offset"), "coverage_start_offset"),
            gaps=tuple(PlanGap(_field(g, "start_offset", int), _field(g, "end_offset", int), _field(g, "reason", str)) for g in body.get("gaps") or ()),
        )

    def plan(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, read_committed: bool = False, range_bytes: int | None = None
    ) -> Plan:
        """The read plan from ``offset``; ``OffsetNotRemoteError`` when remote storage lacks it.
        ``read_committed``: the plan also carries the remote last stable offset. ``range_bytes``:
        the preferred size of one range (None: ``max_bytes``, so the plan comes in as few ranges,
        hence GETs, as its batches allow; at least the gateway's minimum, 4096)."""
        params: dict[str, Any] = {"offset": offset, "max_bytes": max_bytes, "range_bytes": max(MIN_RANGE_BYTES, range_bytes or max_bytes)}
        if read_committed:
            params["isolation_level"] = "read_committed"
        body = self._get_json(f"{_partition_path(topic, partition)}/plan", params=params)
        segment = _field(body, "segment", dict)
        ranges = tuple(
            PlannedRange(
                start=_field(r, "start", int),
                end=_field(r, "end", int),
                first_offset=_field(r, "first_offset", int),
                last_offset=_field(r, "last_offset", int),
                url=_field(r, "url", str),
                range_header=_field(r, "range_header", str),
                transformed=_chunked_range(r.get("transformed")),
            )
            for r in _field(body, "ranges", list)
        )
        if not ranges:
            raise GatewayRequestError(f"plan for {topic}-{partition} offset {offset} has no ranges", status=200, code="malformed_response")
        gap = body.get("gap")
        return Plan(
            topic=topic,
            partition=partition,
            offset=offset,
            object_key=_field(segment, "object_key", str),
            segment_base_offset=_field(segment, "base_offset", int),
            segment_last_offset=_field(segment, "last_offset", int),
            ranges=ranges,
            next_offset=_field(body, "next_offset", int),
            expires_at_ms=_field(body, "expires_at_ms", int),
            gap=None if gap is None else PlanGap(_field(gap, "start_offset", int), _field(gap, "end_offset", int), _field(gap, "reason", str)),
            last_stable_offset=_optional_int(body.get("last_stable_offset"), "last_stable_offset"),
        )

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first remote offset whose timestamp is >= ``timestamp_ms`` (None: none remote)."""
        found = self.record_for_timestamp(topic, partition, timestamp_ms)
        return None if found is None else found[0]

    def record_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> tuple[int, int | None] | None:
        """(offset, its record's timestamp) of the first remote record stamped >= ``timestamp_ms``
        (Kafka's ListOffsets rule over remote data; None: none remote)."""
        body = self._get_json(f"{_partition_path(topic, partition)}/offsets", params={"timestamp": timestamp_ms})
        offset = _optional_int(body.get("offset"), "offset")
        return None if offset is None else (offset, _optional_int(body.get("record_timestamp"), "record_timestamp"))

    # -- presigned S3 ranges ------------------------------------------------------------------
    def fetch(self, planned: PlannedRange) -> bytes | memoryview:
        """GET one presigned range: a 206 whose ``Content-Range`` and length match the plan. Its bytes
        come as a read-only memoryview of reused memory (``http.read_body``) through this client's own
        transport, as bytes otherwise (a ``transport`` given, ``https://``, the pure-Python reference)."""

        def attempt() -> bytes | memoryview:
            answered = None if self._direct is None else self._direct.get(planned.url, {"Range": planned.range_header}, self._timeout_s)
            if answered is None:
                with self._s3.stream("GET", planned.url, headers={"Range": planned.range_header}) as response:
                    return checked(response)
            raw, body = answered
            try:
                if raw.status == 206:  # the common answer read without httpx's models (StdlibTransport.get)
                    check_content_range(raw.getheader("content-range"), planned, where)
                    return sized(body.read_pooled())
                return checked(httpx.Response(raw.status, headers=raw.getheaders(), stream=body, request=httpx.Request("GET", planned.url)))
            finally:
                body.close()

        def checked(response: httpx.Response) -> bytes | memoryview:
            status = response.status_code
            if status != 206 and (answered := _range_endpoint_error(response, where)) is not None:
                raise answered  # the gateway's own byte-range URL (encrypted KIP-405 segment) answered its error envelope
            if status in (403, 404):  # expired URL, or an object removed since it was planned: re-plan
                response.read()
                raise PresignedUrlError(f"S3 refused the presigned GET of {where} ({status}): {_s3_message(response)}")
            if status >= 500 or status == 429:
                raise TransientReadError(f"S3 answered {status} for {where}")
            if status == 200:  # the Range was ignored: the body is the whole object; not read
                raise RemoteReadError(
                    f"S3 answered 200 instead of 206 Partial Content for {where}: the server or a proxy ignored the Range header "
                    f"(Content-Length {response.headers.get('content-length', 'unknown')}); refusing to read the whole object"
                )
            if status != 206:
                response.read()
                raise RemoteReadError(f"S3 answered {status} for {where}: {_s3_message(response)}")
            check_content_range(response.headers.get("content-range"), planned, where)
            return sized(read_body(response))

        def sized(data: bytes | memoryview) -> bytes | memoryview:
            if len(data) != planned.size:
                raise TransientReadError(f"S3 returned {len(data)} bytes for the {planned.size}-byte range of {where}")
            return data

        where = f"{planned.range_header} of {object_url(planned.url)}"
        return self._with_retries(attempt, f"GET of {where} (offsets {planned.first_offset}..{planned.last_offset})")

    # -- plumbing -----------------------------------------------------------------------------
    def _get_json(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        def attempt() -> dict[str, Any]:
            response = self._api.get(path, params=params)
            if response.status_code != 200:  # a transient answer is a retriable GatewayRequestError
                raise _gateway_error(response, has_token=self.has_token)
            try:
                body = response.json()
            except ValueError as err:
                raise GatewayRequestError(f"gateway answered non-JSON for {path}", status=response.status_code, code="malformed_response") from err
            if not isinstance(body, dict):
                raise GatewayRequestError(f"gateway answered {type(body).__name__} for {path}", status=200, code="malformed_response")
            return body

        return self._with_retries(attempt, f"gateway request {self.base_url}{path}")

    def _with_retries(self, attempt: Callable[[], T], what: str) -> T:
        """``attempt()`` under ``self.retry`` (module doc); a transport failure that is not transient,
        or a transient failure that outlived the attempts, raised as ``RemoteReadError`` naming ``what``."""
        try:
            return self.retry.call(attempt, what=what)
        except Exception as err:
            if is_transient(err):  # the policy gave up on it
                raise RemoteReadError(f"{what} failed after {self.retry.attempts} attempts: {err}") from err
            if isinstance(err, httpx.TransportError):
                raise RemoteReadError(f"{what} failed: {err}") from err
            raise

    def time_ranges(self, topic: str, partition: int, from_ms: int, to_ms: int) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]], int | None]:
        """(pruned, inexact, earliest_offset) of the gateway's time-ranges endpoint (``routes.time_ranges``),
        spans as (first_offset, last_offset inclusive, bytes): the remote offsets proven to hold no record
        stamped in [from_ms, to_ms], the kept segments whose minimum timestamp is not exact, and the
        first registered offset answered over (None: none registered)."""
        body = self._get_json(f"{_partition_path(topic, partition)}/time-ranges", params={"from_timestamp": from_ms, "to_timestamp": to_ms})

        def spans(name: str) -> list[tuple[int, int, int]]:
            items = body.get(name)
            if not isinstance(items, list):
                raise GatewayRequestError(f"gateway answer lacks a valid {name!r} (list): got {items!r}", status=200, code="malformed_response")
            return [(_field(i, "first_offset", int), _field(i, "last_offset", int), _field(i, "size", int)) for i in items]

        earliest = body.get("earliest_offset")
        if earliest is not None and not isinstance(earliest, int):
            raise GatewayRequestError(f"gateway answered a non-integer earliest_offset {earliest!r}", status=200, code="malformed_response")
        return spans("pruned"), spans("inexact"), earliest


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (certifi, ``SSL_CERT_FILE``/``SSL_CERT_DIR``), built once and shared (thread-safe)."""
    return httpx.create_ssl_context()


def _partition_path(topic: str, partition: int) -> str:
    """The API path of a partition; a topic name Kafka forbids is refused here (``tiered_kafka.topic_names``:
    ``..`` would otherwise be a dot-segment the URL loses, reaching another resource)."""
    problem = topic_name_problem(topic)
    if problem is not None:
        raise ConfigError(problem)
    return f"/topics/{quote(topic, safe='')}/partitions/{partition}"


def _optional_int(value: Any, name: str) -> int | None:
    """An optional integer field (absent or null: None, e.g. from a gateway older than the field)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise GatewayRequestError(f"gateway answered a non-integer {name} {value!r}", status=200, code="malformed_response")


def _chunked_range(body: Any) -> ChunkedRange | None:
    if body is None:
        return None
    sizes, originals = _field(body, "chunk_sizes", list), _field(body, "original_chunk_sizes", list)
    if not all(isinstance(n, int) for n in sizes + originals) or len(sizes) != len(originals) or not sizes:
        raise GatewayRequestError("malformed chunk sizes in a plan's transformed range", status=200, code="malformed_response")
    return ChunkedRange(
        _field(body, "compression", str), _field(body, "fetch_start", int), _field(body, "fetch_end", int), _field(body, "range_header", str),
        tuple(sizes), tuple(originals), _field(body, "original_start", int),
    )


def _topic_map(body: Any) -> dict[str, list[int]]:
    """``TopicList.topics`` as topic -> partitions."""
    return {_field(t, "name", str): _field(t, "partitions", list) for t in _field(body, "topics", list)}


def _field(body: Any, name: str, kind: type[T]) -> T:
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise GatewayRequestError(f"gateway answer lacks a valid {name!r} ({kind.__name__}): got {value!r}", status=200, code="malformed_response")
    return value


def _range_endpoint_error(response: httpx.Response, where: str) -> Exception | None:
    """The error for a non-206 answer of the gateway's byte-range URL (``/rsm-ranges/v1/``, an
    encrypted KIP-405 segment's plan) in the gateway's JSON error envelope; None for anything else
    (S3 answers XML: its rule applies). ``rsm_url_refused`` is ``PresignedUrlError`` (re-plan, as an
    expired presigned URL); a code trying again may fix (``transient_answer``) is retried; any other
    (``rsm_decryption_failed``, ``corrupt_remote_data``, ...) is a ``GatewayRequestError`` with that
    code, naming the object, never retried (``GatewayRequestError.retriable``)."""
    if "/rsm-ranges/v1/" not in response.request.url.path or "json" not in response.headers.get("content-type", ""):
        return None
    response.read()
    try:
        error = response.json()["error"]
        code, detail = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return None
    message = f"gateway answered {response.status_code} {code} for {where}: {detail}"
    if code == "rsm_url_refused":
        return PresignedUrlError(message)
    return GatewayRequestError(message, status=response.status_code, code=code, details={k: v for k, v in error.items() if k not in ("code", "message")})


def _gateway_error(response: httpx.Response, *, has_token: bool = True) -> GatewayRequestError | OffsetNotRemoteError:
    """The exception for a gateway's non-200 answer (the mapping in the module docstring)."""
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        details = {k: v for k, v in error.items() if k not in ("code", "message")}
    except (ValueError, KeyError, TypeError):
        code, message, details = "http_error", response.text[:200], {}
    status = response.status_code
    if status == 416 and code in ("offset_out_of_range", "offset_not_in_remote_storage"):
        offset = int(response.request.url.params.get("offset", -1))
        earliest, latest = details.get("earliest_offset"), details.get("latest_offset")
        return OffsetNotRemoteError(
            f"gateway: {message}", offset=offset, earliest=earliest if isinstance(earliest, int) else None, latest=latest if isinstance(latest, int) else None
        )
    if status == 404 and code == "unknown_topic_or_partition" and response.request.url.path.endswith("/plan"):
        offset = int(response.request.url.params.get("offset", -1))
        return OffsetNotRemoteError(f"gateway: {message}", offset=offset, earliest=None, latest=None)
    if status == 403 and code == "topic_authorization_failed":
        topic = details.get("topic")
        if not isinstance(topic, str):
            topic = _topic_of(response.request.url.path) or "?"
        return TopicAuthorizationError(
            f"TOPIC_AUTHORIZATION_FAILED: the gateway token may not read topic {topic!r} (403 topic_authorization_failed: {message})",
            topic=topic,
            details=details,
        )
    if status == 401:
        problem = "the gateway token was not accepted" if has_token else "no gateway token was given (set tiered.gateway.token)"
        return GatewayRequestError(f"gateway answered 401 {code}: {problem}: {message}", status=status, code=code, details=details)
    return GatewayRequestError(f"gateway answered {status} {code}: {message}", status=status, code=code, details=details)


def _topic_of(path: str) -> str | None:
    """The topic of an API path ``.../topics/{topic}/...`` (None for other paths)."""
    parts = path.split("/")
    return unquote(parts[parts.index("topics") + 1]) if "topics" in parts[:-1] else None


def object_url(url: str) -> str:
    """A presigned URL without its query string (the signature): safe to put in a message or a log."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def check_content_range(header: str | None, planned: PlannedRange, where: str) -> None:
    """A 206's ``Content-Range: bytes first-last/complete`` must be the range asked (RFC 9110, 14.4)."""
    expected = f"bytes {planned.start}-{planned.end - 1}/"
    if header is None or not header.startswith(expected):
        raise RemoteReadError(f"S3 answered 206 for {where} with Content-Range {header!r}, expected {expected}<size>: not the range asked")


def _s3_message(response: httpx.Response) -> str:
    text = response.text
    start, end = text.find("<Message>"), text.find("</Message>")
    return text[start + 9 : end] if 0 <= start < end else text[:200]

