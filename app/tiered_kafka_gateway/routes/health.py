"""Liveness, readiness and Prometheus metrics.

``/healthz`` and ``/metrics`` are ``async def`` and do no I/O: they run on the event loop, never
queued behind sync routes in the thread pool (a saturated Kafka proxy can occupy every thread of it).
``/readyz`` pings Redis and S3, so it is sync; it names the clusters only for an authenticated
caller (``deps`` module docstring).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tiered_kafka_gateway.deps import caller_of
from tiered_kafka_gateway.models import ErrorResponse, Health

router = APIRouter()


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
    clusters = {name: reader.check() for name, reader in request.app.state.readers.items()}
    ok = all(v == "ok" for checks in clusters.values() for v in checks.values())
    shown = clusters if caller_of(request) is not None else {}
    body = Health(status="ok" if ok else "unavailable", clusters=shown)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={401: {"model": ErrorResponse, "description": "auth is enabled and no valid token was given"}},
)
async def metrics(request: Request) -> Response:
    request.app.state.metrics.refresh(request.app.state.readers)
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
