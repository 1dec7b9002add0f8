"""Liveness, readiness and Prometheus metrics.

``/healthz`` and ``/metrics`` are ``async def`` and do no I/O: they run on the event loop, never
queued behind sync routes in the thread pool (a saturated Kafka proxy can occupy every thread of it).
``/readyz`` pings Redis and S3, so it is sync; it names the clusters only for an authenticated
caller, and of those only the clusters its token sees (``deps`` module docstring). It needs no token, so its checks are shared: one answer is
kept for ``READY_CACHE_S`` (one second) and every request meanwhile gets it, so a flood of probes
costs each dependency at most one call per cluster per second (concurrent probes wait for the one
in flight). A check's detail (a dependency's own error text, hosts and IPs) is never shown: a
failed check says ``unavailable (error id ...)`` and the log has the detail under that id
(``errors.hidden_failure``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tiered_kafka_gateway.deps import caller_of
from tiered_kafka_gateway.errors import ErrorCode, error_response, hidden_failure
from tiered_kafka_gateway.models import ErrorResponse, Health

router = APIRouter()
READY_CACHE_S = 1.0


class ReadyChecks:
    """The clusters' checks, kept for ``ttl_s`` (module doc); one per app (``app.state.ready``)."""

    def __init__(self, ttl_s: float = READY_CACHE_S) -> None:
        self.ttl_s = ttl_s
        self.runs = 0  # checks made (tests)
        self._lock = threading.Lock()
        self._answer: tuple[float, dict[str, dict[str, str]]] | None = None

    def get(self, readers: dict[str, Any]) -> dict[str, dict[str, str]]:
        with self._lock:  # concurrent probes wait for the check in flight
            if self._answer is not None and time.monotonic() - self._answer[0] < self.ttl_s:
                return self._answer[1]
            self.runs += 1
            clusters = {name: {k: _shown(name, k, v) for k, v in reader.check().items()} for name, reader in readers.items()}
            self._answer = (time.monotonic(), clusters)
            return clusters


def _shown(cluster: str, dependency: str, status: str) -> str:
    """A check's status as shown: "ok", or its words before any detail, with an error id for the log's detail."""
    if status == "ok" or "error id" in status:
        return status
    return f"{status.split(':', 1)[0].strip()} (error id {hidden_failure(dependency, f'cluster {cluster}: {status}')})"


def _ready_checks(request: Request) -> ReadyChecks:
    state = request.app.state
    checks = getattr(state, "ready", None)
    if checks is None:
        checks = state.ready = ReadyChecks()
    return checks  # type: ignore[no-any-return]


@router.get("/healthz", operation_id="health", summary="The process is up")
async def health() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    operation_id="ready",
    summary="Redis and S3 answer for every cluster",
    responses={503: {"model": Health}, 500: {"model": ErrorResponse}},
)
def ready(request: Request) -> Response:
    clusters = _ready_checks(request).get(request.app.state.readers)
    ok = all(v == "ok" for checks in clusters.values() for v in checks.values())
    caller = caller_of(request)
    shown = {} if caller is None else {name: checks for name, checks in clusters.items() if caller.sees(name)}  # the token's clusters only
    body = Health(status="ok" if ok else "unavailable", clusters=shown)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        401: {"model": ErrorResponse, "description": "auth is enabled and no valid token was given"},
        403: {"model": ErrorResponse, "description": 'metrics_not_authorized: the token\'s grant lacks "metrics": true'},
    },
)
async def metrics(request: Request) -> Response:
    caller = caller_of(request)
    if caller is None or not caller.metrics:  # a token that names metrics only (tokens module doc: the decision)
        return error_response(ErrorCode.METRICS_NOT_AUTHORIZED, 'this token may not read /metrics: a scrape token\'s grant says "metrics": true')
    request.app.state.metrics.refresh(request.app.state.readers)
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
