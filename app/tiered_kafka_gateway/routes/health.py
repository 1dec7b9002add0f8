"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tiered_kafka_gateway.models import Health

router = APIRouter()


@router.get("/healthz", operation_id="health", summary="The process is up")
def health() -> Health:
    return Health(status="ok")


@router.get("/readyz", operation_id="ready", summary="Redis and S3 answer for every cluster", responses={503: {"model": Health}})
def ready(request: Request) -> Response:
    clusters = {name: reader.check() for name, reader in request.app.state.readers.items()}
    ok = all(v == "ok" for checks in clusters.values() for v in checks.values())
    body = Health(status="ok" if ok else "unavailable", clusters=clusters)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get("/metrics", operation_id="metrics", summary="Prometheus metrics", response_class=Response)
def metrics(request: Request) -> Response:
    request.app.state.metrics.refresh(request.app.state.readers)
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
