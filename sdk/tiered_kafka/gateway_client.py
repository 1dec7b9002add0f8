"""The gateway's v1 API as clients see it, and the presigned ranged GETs its read plans hand out.

Used by ``TieredConsumer``, the ``tiered-kafka`` CLI and the PySpark data source (whose executors
need nothing else to read remote data). The JSON shapes are those of ``openapi/openapi.json``
(the gateway's ``models.py``); every field read here is validated, so a malformed answer is a
``GatewayRequestError`` naming the field, never a ``KeyError`` deep inside a read.

Two HTTP connection pools (httpx, keep-alive):
  * the gateway's, which sends the caller's token (``Authorization: Bearer``);
  * S3's, for presigned URLs, which sends *no* credentials: the URL is the credential. Its only
    extra header is the ``Range`` the URL was signed with (the read-plan contract).

Retries: connection failures, timeouts and 5xx/429 answers are retried ``retries`` times with
exponential backoff; then the last error is raised (``RemoteReadError``). A 4xx answer of the
gateway is raised at once. A 403 from S3 (the URL expired) or a 404 (remote retention removed the
object after it was planned) is ``PresignedUrlError``: the caller re-plans and tries once more; a
re-plan of an offset no longer remote raises ``OffsetNotRemoteError``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from tiered_kafka.errors import GatewayRequestError, OffsetNotRemoteError, PresignedUrlError, RemoteReadError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PlannedRange:
    """One presigned, batch-aligned byte range of a segment object (``RangeOut``)."""

    start: int
    end: int
    first_offset: int
    last_offset: int
    url: str
    range_header: str

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class PlanGap:
    start_offset: int
    end_offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class Plan:
    """A read plan (``PlanResponse``): ranges of one segment, the first holding ``offset``."""

    topic: str
    partition: int
    offset: int
    object_key: str
    segment_base_offset: int
    segment_last_offset: int
    ranges: tuple[PlannedRange, ...]
    next_offset: int
    expires_at_ms: int
    gap: PlanGap | None


@dataclass(frozen=True, slots=True)
class RemoteExtent:
    earliest_offset: int
    latest_offset: int
    segment_count: int
    total_bytes: int

    def holds(self, offset: int) -> bool:
        return self.earliest_offset <= offset <= self.latest_offset


@dataclass(frozen=True, slots=True)
class PartitionExtent:
    """What remote storage and Kafka hold of a partition (``PartitionDetail``)."""

    remote: RemoteExtent | None
    kafka_log_start_offset: int | None
    kafka_high_watermark: int | None


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
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"gateway URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.cluster = cluster
        self.retries = retries
        self.backoff_s = backoff_s
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._api = httpx.Client(base_url=f"{self.base_url}/v1/clusters/{quote(cluster, safe='')}", headers=headers, timeout=timeout_s, limits=limits)
        self._s3 = httpx.Client(timeout=timeout_s, limits=limits)

    def close(self) -> None:
        self._api.close()
        self._s3.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- gateway API ------------------------------------------------------------------------
    def topics(self) -> dict[str, list[int]]:
        body = self._get_json("/topics")
        return {_field(t, "name", str): _field(t, "partitions", list) for t in _field(body, "topics", list)}

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
            ),
            kafka_log_start_offset=None if kafka is None else _field(kafka, "log_start_offset", int),
            kafka_high_watermark=None if kafka is None else _field(kafka, "high_watermark", int),
        )

    def plan(self, topic: str, partition: int, offset: int, max_bytes: int) -> Plan:
        """The read plan from ``offset``; ``OffsetNotRemoteError`` when remote storage lacks it."""
        body = self._get_json(f"{_partition_path(topic, partition)}/plan", params={"offset": offset, "max_bytes": max_bytes})
        segment = _field(body, "segment", dict)
        ranges = tuple(
            PlannedRange(
                start=_field(r, "start", int),
                end=_field(r, "end", int),
                first_offset=_field(r, "first_offset", int),
                last_offset=_field(r, "last_offset", int),
                url=_field(r, "url", str),
                range_header=_field(r, "range_header", str),
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
        )

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first remote offset whose timestamp is >= ``timestamp_ms`` (None: none remote)."""
        body = self._get_json(f"{_partition_path(topic, partition)}/offsets", params={"timestamp": timestamp_ms})
        offset = body.get("offset")
        if offset is not None and not isinstance(offset, int):
            raise GatewayRequestError(f"gateway answered a non-integer offset {offset!r}", status=200, code="malformed_response")
        return offset

    # -- presigned S3 ranges ------------------------------------------------------------------
    def fetch(self, planned: PlannedRange) -> bytes:
        """GET one presigned range; its length is checked against the plan."""

        def attempt() -> bytes:
            response = self._s3.get(planned.url, headers={"Range": planned.range_header})
            if response.status_code in (403, 404):  # expired URL, or an object removed since it was planned: re-plan
                raise PresignedUrlError(f"S3 refused the presigned GET of bytes {planned.start}..{planned.end} ({response.status_code}): {_s3_message(response)}")
            if response.status_code >= 500 or response.status_code == 429:
                raise _Retry(f"S3 answered {response.status_code} for bytes {planned.start}..{planned.end}")
            if response.status_code not in (200, 206):
                raise RemoteReadError(f"S3 answered {response.status_code} for bytes {planned.start}..{planned.end}: {_s3_message(response)}")
            data = response.content
            if len(data) != planned.size:
                raise _Retry(f"S3 returned {len(data)} bytes for the {planned.size}-byte range {planned.range_header}")
            return data

        return self._with_retries(attempt, f"GET of range {planned.range_header} (offsets {planned.first_offset}..{planned.last_offset})")

    # -- plumbing -----------------------------------------------------------------------------
    def _get_json(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        def attempt() -> dict[str, Any]:
            response = self._api.get(path, params=params)
            if response.status_code >= 500 or response.status_code == 429:
                raise _Retry(_describe_error(response))
            if response.status_code != 200:
                raise _gateway_error(response)
            try:
                body = response.json()
            except ValueError as err:
                raise GatewayRequestError(f"gateway answered non-JSON for {path}", status=response.status_code, code="malformed_response") from err
            if not isinstance(body, dict):
                raise GatewayRequestError(f"gateway answered {type(body).__name__} for {path}", status=200, code="malformed_response")
            return body

        return self._with_retries(attempt, f"gateway request {self.base_url}{path}")

    def _with_retries(self, attempt: Callable[[], T], what: str) -> T:
        delay = self.backoff_s
        for number in range(self.retries + 1):
            try:
                return attempt()
            except (_Retry, httpx.TransportError) as err:
                if number == self.retries:
                    raise RemoteReadError(f"{what} failed after {self.retries + 1} attempts: {err}") from err
                log.debug("retrying %s after %s", what, err)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")


class _Retry(Exception):
    """A transient failure: try again."""


def _partition_path(topic: str, partition: int) -> str:
    return f"/topics/{quote(topic, safe='')}/partitions/{partition}"


def _field(body: Any, name: str, kind: type[T]) -> T:
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise GatewayRequestError(f"gateway answer lacks a valid {name!r} ({kind.__name__}): got {value!r}", status=200, code="malformed_response")
    return value


def _gateway_error(response: httpx.Response) -> GatewayRequestError | OffsetNotRemoteError:
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        details = {k: v for k, v in error.items() if k not in ("code", "message")}
    except (ValueError, KeyError, TypeError):
        code, message, details = "http_error", response.text[:200], {}
    if response.status_code == 416 and code in ("offset_out_of_range", "offset_not_in_remote_storage"):
        offset = int(response.request.url.params.get("offset", -1))
        earliest, latest = details.get("earliest_offset"), details.get("latest_offset")
        return OffsetNotRemoteError(
            f"gateway: {message}", offset=offset, earliest=earliest if isinstance(earliest, int) else None, latest=latest if isinstance(latest, int) else None
        )
    if response.status_code == 404 and code == "unknown_topic_or_partition" and response.request.url.path.endswith("/plan"):
        offset = int(response.request.url.params.get("offset", -1))
        return OffsetNotRemoteError(f"gateway: {message}", offset=offset, earliest=None, latest=None)
    return GatewayRequestError(f"gateway answered {response.status_code} {code}: {message}", status=response.status_code, code=code, details=details)


def _describe_error(response: httpx.Response) -> str:
    return f"gateway answered {response.status_code}: {response.text[:200]}"


def _s3_message(response: httpx.Response) -> str:
    text = response.text
    start, end = text.find("<Message>"), text.find("</Message>")
    return text[start + 9 : end] if 0 <= start < end else text[:200]

