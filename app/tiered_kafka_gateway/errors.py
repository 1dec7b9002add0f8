"""Errors of the gateway and their JSON form: ``{"error": {"code": ..., "message": ..., <details>}}``.

Every response that is not a success has this shape, whoever produced it:

- domain errors: the gateway's own answers, raised as ``GatewayError`` (it carries its
  ``ErrorCode``), and the shared core's exceptions (``tiered_kafka.errors``, the registry's), raised
  as they are: ``ANSWERS`` is the one table from an exception class to its ``ErrorCode`` (the
  nearest class in the table wins), and one handler answers them all (``install_handlers``). No
  module translates a core exception into a ``GatewayError``; a module that knows *which* object or
  key failed names it with ``about(where)``, and the answer's message starts with it. A class not
  in the table reaching a route is a bug: 500 ``internal_error`` with an id, as below. Corrupt
  registry data is a 500 ``corrupt_registry_data`` (clients do not retry a 500: asking again
  cannot help), logged at ERROR with the key and field its message names;
- FastAPI's validation errors: 422 ``invalid_request`` with the ``problems``;
- Starlette's own: an unrouted path is 404 ``not_found``, a wrong method 405
  ``method_not_allowed`` (with its ``Allow`` header);
- an unexpected exception: 500 ``internal_error`` whose body carries only an ``error_id``; the
  same id is logged with the traceback (``GuardUnexpected``). It is not a 503: a 503 tells a
  client to retry, and a bug does not go away by retrying.

**A dependency's failure** (issue 29: bodies carried raw boto, redis and librdkafka text, with
internal hosts and IPs): the answers of ``DEPENDENCIES`` (S3, Redis, Kafka unavailable or refusing)
name the failing ``dependency`` and carry an ``error_id``; their message keeps only the gateway's
own words, the text before the first ``": "`` (the convention of every such message: "S3 read of
KEY failed: <boto's text>", "Kafka is unavailable: <librdkafka's text>"; ``about`` and the table's
leads follow it too), and the whole message is logged once with the same id (``hidden_failure``,
also ``/readyz``'s detail). One rule, here, for every module that raises them.

**Answers about absence** (DESIGN.md, contract 6). Authentication comes first: with
``auth.enabled``, a request without a valid token is answered 401 ``unauthorized`` with one body
whatever its path (an existing or unknown cluster, an unrouted path), so that unauthenticated
probing cannot tell which names exist (``deps.Authenticate``). An authenticated caller asking for a
topic its token does not cover gets 403 ``topic_authorization_failed`` with the ``topic`` and
``kafka_error_code`` 29, as Kafka answers TOPIC_AUTHORIZATION_FAILED (``Errors.java``) whether or
not the topic exists: never a 404, which clients read as "no data". A 404 says the cluster, topic or
partition has no data the gateway can see anywhere (remote storage or Kafka).

**Offsets before the coverage start**: a plan for an offset below the partition's coverage start
(the log start the agent first observed, ``Registry.coverage_start``) that remote storage does not
hold is 416 ``offset_out_of_range``, like any offset below the remote range, with the details
``coverage_start_offset`` (and ``earliest_offset``/``latest_offset``) and a message saying the agent
never followed those offsets: they are neither lost nor a gap, they predate the agent.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tiered_kafka.errors import FormatError, OffsetNotRemoteError, OffsetOutOfRangeError, RsmDecryptionError, TieredKafkaError, UnsupportedCodecError
from tiered_kafka.format.batch_index import UnsupportedFormatError
from tiered_kafka.registry import MalformedRegistryDataError, RegistryError, RegistryUnavailableError

log = logging.getLogger(__name__)

KAFKA_TOPIC_AUTHORIZATION_FAILED = 29  # org.apache.kafka.common.protocol.Errors.TOPIC_AUTHORIZATION_FAILED


@enum.unique
class ErrorCode(enum.Enum):
    """(HTTP status, stable code) of every error the gateway returns."""

    INVALID_REQUEST = (422, "invalid_request")
    UNAUTHORIZED = (401, "unauthorized")
    TOPIC_AUTHORIZATION_FAILED = (403, "topic_authorization_failed")
    NOT_FOUND = (404, "not_found")
    METHOD_NOT_ALLOWED = (405, "method_not_allowed")
    UNKNOWN_CLUSTER = (404, "unknown_cluster")
    UNKNOWN_TOPIC_OR_PARTITION = (404, "unknown_topic_or_partition")
    OFFSET_OUT_OF_RANGE = (416, "offset_out_of_range")
    OFFSET_NOT_REMOTE = (416, "offset_not_in_remote_storage")
    UNSUPPORTED_FORMAT = (422, "unsupported_segment_format")
    INTERNAL_ERROR = (500, "internal_error")
    CORRUPT_REGISTRY_DATA = (500, "corrupt_registry_data")  # the registry holds what its schema forbids: asking again cannot help
    REGISTRY_ERROR = (500, "registry_error")  # Redis refused a command for a reason retrying cannot fix (e.g. WRONGTYPE)
    CORRUPT_REMOTE_DATA = (502, "corrupt_remote_data")
    REGISTRY_UNAVAILABLE = (503, "registry_unavailable")
    STORAGE_UNAVAILABLE = (503, "storage_unavailable")
    KAFKA_UNAVAILABLE = (503, "kafka_unavailable")
    KAFKA_NOT_CONFIGURED = (409, "kafka_not_configured")
    RSM_URL_REFUSED = (403, "rsm_url_refused")  # a byte-range URL of an encrypted RSM segment: bad signature, expired, other range (rsm_urls)
    RSM_DECRYPTION_FAILED = (502, "rsm_decryption_failed")  # an RSM data key or chunk does not decrypt: wrong key, tampered tag, truncated
    BATCH_TOO_LARGE = (422, "batch_too_large")  # one batch decompresses past max_decoded_bytes (records module doc)
    HOST_NOT_ALLOWED = (403, "host_not_allowed")  # a Host header not in allowed_hosts (http_guards: DNS rebinding)
    ANONYMOUS_BEYOND_LOOPBACK = (403, "anonymous_beyond_loopback")  # no auth, reached beyond loopback (http_guards)
    METRICS_NOT_AUTHORIZED = (403, "metrics_not_authorized")  # a token without "metrics": true (tokens module doc)
    CSRF_REFUSED = (403, "csrf_refused")  # a state-changing form without its CSRF token or from another origin (sessions)

    @property
    def status(self) -> int:
        return self.value[0]

    @property
    def code(self) -> str:
        return self.value[1]


class GatewayError(TieredKafkaError):
    """An answer the gateway itself decides (an unknown partition, an offset outside the remote
    range, a malformed request, an S3 or Kafka failure): its ``ErrorCode`` and the ``details`` the
    error body carries."""

    def __init__(self, error: ErrorCode, message: str, **details: object) -> None:
        super().__init__(message)
        self.error = error
        self.message = message
        self.details = details


@dataclass(frozen=True)
class Answer:
    """How the table answers an exception class: its code, and what the message says first
    (``{cluster}``: the cluster the request names)."""

    error: ErrorCode
    lead: str = ""
    log_error: bool = False  # logged at ERROR: an operator must act (the data is corrupt, or Redis refuses)


ANSWERS: dict[type[TieredKafkaError], Answer] = {
    # what a later attempt may get right (Redis unreachable, loading, cluster down): 503, retried by clients
    RegistryUnavailableError: Answer(ErrorCode.REGISTRY_UNAVAILABLE, "the registry of cluster {cluster} is unavailable: "),
    # the registry holds what its schema forbids (its message names the key and field): retrying never ends
    MalformedRegistryDataError: Answer(ErrorCode.CORRUPT_REGISTRY_DATA, "the registry of cluster {cluster} holds malformed data: ", log_error=True),
    # Redis refused a command for a reason retrying cannot fix (e.g. WRONGTYPE), and the registry's other refusals
    RegistryError: Answer(ErrorCode.REGISTRY_ERROR, "the registry of cluster {cluster} refused a command: ", log_error=True),
    RsmDecryptionError: Answer(ErrorCode.RSM_DECRYPTION_FAILED),
    UnsupportedFormatError: Answer(ErrorCode.UNSUPPORTED_FORMAT),
    UnsupportedCodecError: Answer(ErrorCode.UNSUPPORTED_FORMAT),
    FormatError: Answer(ErrorCode.CORRUPT_REMOTE_DATA),  # bytes in S3 that are not Kafka's (every FormatError below it too)
    OffsetNotRemoteError: Answer(ErrorCode.OFFSET_NOT_REMOTE),
    # the gateway checks every offset against its source (registry, RSM metadata) before planning:
    # a segment that then does not hold it contradicts its source
    OffsetOutOfRangeError: Answer(ErrorCode.CORRUPT_REMOTE_DATA, "the segment and its registry entry or RSM metadata disagree: "),
}
"""Every core exception a route may meet, by class (the nearest in an exception's MRO wins).
``GatewayError`` carries its own code."""

DEPENDENCIES: dict[ErrorCode, str] = {
    ErrorCode.STORAGE_UNAVAILABLE: "s3",
    ErrorCode.REGISTRY_UNAVAILABLE: "redis",
    ErrorCode.REGISTRY_ERROR: "redis",
    ErrorCode.KAFKA_UNAVAILABLE: "kafka",
}
"""The answers about a dependency's failure, and the dependency each names (module doc)."""

_WHERE = "_tiered_kafka_gateway_where"


def hidden_failure(dependency: str, detail: str, *, level: int = logging.WARNING) -> str:
    """Log ``detail`` (a dependency's own error text) under a fresh error id, and return the id:
    what a body or ``/readyz`` shows instead of the detail (module doc)."""
    error_id = uuid.uuid4().hex[:16]
    log.log(level, "%s failure %s: %s", dependency, error_id, detail)
    return error_id


def _public(error: ErrorCode, message: str, details: dict[str, object]) -> tuple[str, dict[str, object]]:
    """The body's message and details of an answer: a dependency's failure keeps the gateway's own
    words only, with the dependency and an error id (its detail goes to the log: module doc)."""
    dependency = DEPENDENCIES.get(error)
    if dependency is None:
        return message, details
    error_id = hidden_failure(dependency, message, level=logging.ERROR if error.status == 500 else logging.WARNING)
    summary = message.split(": ", 1)[0].rstrip(" :")
    return f"{summary} ({dependency}; error id {error_id}: the gateway log has the details)", {**details, "dependency": dependency, "error_id": error_id}


@contextmanager
def about(where: str) -> Iterator[None]:
    """Name ``where`` (an object key) in the answer to a core exception escaping the block: the
    answer's message starts with it (the innermost ``about`` wins). Nothing is caught or translated."""
    try:
        yield
    except TieredKafkaError as err:
        if not isinstance(err, GatewayError) and not hasattr(err, _WHERE):
            setattr(err, _WHERE, where)
        raise


def _table_answer(exc: BaseException) -> Answer | None:
    """The ``ANSWERS`` entry of the nearest class of ``exc`` in the table, if any."""
    return next((ANSWERS[c] for c in type(exc).__mro__ if c in ANSWERS), None)  # type: ignore[index]


def answer_for(exc: TieredKafkaError, cluster: str | None = None) -> tuple[ErrorCode, str, dict[str, object]] | None:
    """The answer to ``exc`` (code, message, details): its own for a ``GatewayError``, else from
    ``ANSWERS``; None when no class in its MRO is there. A dependency's failure is answered
    without its detail, which is logged with the body's ``error_id`` (module doc)."""
    if isinstance(exc, GatewayError):
        return exc.error, *_public(exc.error, exc.message, exc.details)
    found = _table_answer(exc)
    if found is None:
        return None
    where = getattr(exc, _WHERE, None)
    message = found.lead.format(cluster=cluster or "?") + (f"{where}: " if where else "") + str(exc)
    if found.log_error and found.error not in DEPENDENCIES:  # a dependency's failure is logged by _public
        log.error("%s (%s)", message, found.error.code)
    return found.error, *_public(found.error, message, {})


def code_of(exc: BaseException) -> ErrorCode | None:
    """The ``ErrorCode`` a route would answer for ``exc`` (None: not a domain error, or not in the table)."""
    if isinstance(exc, GatewayError):
        return exc.error
    found = _table_answer(exc) if isinstance(exc, TieredKafkaError) else None
    return None if found is None else found.error


def topic_authorization_failed(topic: str) -> GatewayError:
    return GatewayError(
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        f"not authorized to read topic {topic!r}: the token's topic patterns do not cover it",
        topic=topic,
        kafka_error_code=KAFKA_TOPIC_AUTHORIZATION_FAILED,
    )


def error_body(error: ErrorCode, message: str, **details: object) -> dict[str, object]:
    return {"error": {"code": error.code, "message": message, **details}}


def error_response(error: ErrorCode, message: str, headers: dict[str, str] | None = None, **details: object) -> JSONResponse:
    if error is ErrorCode.UNAUTHORIZED:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse(error_body(error, message, **details), status_code=error.status, headers=headers)


_HTTP_ERRORS = {e.status: e for e in (ErrorCode.NOT_FOUND, ErrorCode.METHOD_NOT_ALLOWED)}


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(TieredKafkaError)
    async def _domain_error(request: Request, exc: TieredKafkaError) -> JSONResponse:
        found = answer_for(exc, request.path_params.get("cluster"))
        if found is None:  # a bug: GuardUnexpected answers 500 internal_error with an id
            raise exc
        error, message, details = found
        return error_response(error, message, **details)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [{"location": list(e.get("loc", ())), "problem": e.get("msg", "")} for e in exc.errors()]
        return error_response(ErrorCode.INVALID_REQUEST, "malformed parameters", problems=problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        known = _HTTP_ERRORS.get(exc.status_code)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        code = known.code if known is not None else HTTPStatus(exc.status_code).phrase.lower().replace(" ", "_").replace("-", "_")
        return JSONResponse({"error": {"code": code, "message": message}}, status_code=exc.status_code, headers=getattr(exc, "headers", None))


class GuardUnexpected:
    """ASGI middleware: an exception no handler took becomes 500 ``internal_error`` with an id.

    The id (16 hex digits) is logged at ERROR with the method, path and traceback, and is the only
    thing the body says about the failure. The exception is not re-raised, so the server does not
    log it a second time without the id. If the response had already started, nothing can be sent:
    the exception is logged with its id and re-raised.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            error_id = uuid.uuid4().hex[:16]
            log.error("internal error %s on %s %s", error_id, scope.get("method"), scope.get("path"), exc_info=exc)
            if started:
                raise
            response = error_response(ErrorCode.INTERNAL_ERROR, f"internal error {error_id}; the gateway log has its details", error_id=error_id)
            await response(scope, receive, send)
