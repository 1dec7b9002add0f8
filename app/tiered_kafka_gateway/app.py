"""The FastAPI application: ``create_app(settings)``.

Sync endpoints (those that block on Redis, S3 or Kafka) run in AnyIO's thread pool (40 threads);
the probes ``/healthz`` and ``/metrics`` are ``async def`` and never block, so they answer from the
event loop even when every pool thread waits, e.g. for a slot of an unreachable Kafka's proxy pool.

Shutdown (``lifespan``, run by uvicorn and by ``TestClient`` used as a context manager) closes
what the app holds, in order: the Kafka proxy pools of its clusters (``kafka_offsets.close_pools``;
the ``atexit`` hook there stays, for processes that never run the lifespan), then each cluster
reader (``ClusterSource.close``: background load threads, Redis connections, S3 connections).
The readers are built in ``create_app``, not at startup, so an app used without its lifespan
works as before; it then closes nothing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from tiered_kafka_gateway.config import GatewaySettings
from tiered_kafka_gateway import sessions
from tiered_kafka_gateway.deps import Authenticate
from tiered_kafka_gateway.http_guards import HttpGuards
from tiered_kafka_gateway.sessions import Sessions
from tiered_kafka_gateway.tokens import TokenBook, declare_security
from tiered_kafka_gateway import kafka_offsets
from tiered_kafka_gateway.errors import GuardUnexpected, install_handlers
from tiered_kafka_gateway.metrics import GatewayMetrics
from tiered_kafka_gateway.routes import health, partitions, records, rsm_ranges
from tiered_kafka_gateway.routes import time_ranges, ui
from tiered_kafka_gateway.sources import ClusterSource, build_sources

API_VERSION = "1.0.0"


def _operation_id(route: APIRoute) -> str:
    return route.name


class _RouteTiming:
    """Request latency by route template and status (a plain ASGI middleware: cheap per request)."""

    def __init__(self, app: Any, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def record_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.observe(route, status, time.perf_counter() - start)


def _declare_security(app: FastAPI) -> None:
    """The app's OpenAPI description declares its security schemes (``tokens.declare_security``)."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = declare_security(plain())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Nothing to open (``create_app`` did) but the Kafka listeners of clusters that have one
    (``kafka_listener.runner``); on shutdown, close them and every pool (module docstring)."""
    from tiered_kafka_gateway.kafka_listener import runner

    listeners = app.state.kafka_listeners = await runner.start(app)
    try:
        yield
    finally:
        await listeners.stop()
    readers: dict[str, ClusterSource] = app.state.readers
    kafka_offsets.close_pools(readers)
    for reader in readers.values():
        reader.close()


def create_app(settings: GatewaySettings) -> FastAPI:
    app = FastAPI(
        title="tiered-kafka gateway",
        version=API_VERSION,
        description="Turns (topic, partition, offset) into presigned, batch-aligned S3 byte ranges of Kafka segments.",
        generate_unique_id_function=_operation_id,
        lifespan=lifespan,
        docs_url=None,  # no Swagger UI or ReDoc: they load scripts from a CDN (issue 36); openapi/openapi.json is the description
        redoc_url=None,
    )
    _declare_security(app)
    app.state.settings = settings
    app.state.readers = build_sources(settings)  # the one place the clusters' Redis and S3 clients are made
    app.state.metrics = GatewayMetrics(app.state.readers)
    install_handlers(app)
    app.include_router(partitions.router)
    app.include_router(records.router)
    app.include_router(time_ranges.router)
    app.include_router(health.router)
    app.include_router(rsm_ranges.router)
    app.include_router(ui.router)
    app.include_router(sessions.router)
    app.state.sessions = Sessions(settings, TokenBook(settings))

    # outermost last: timing sees every answer, an escaped exception becomes a 500 with an id,
    # and authentication runs before routing (so unrouted paths answer 401 alike too)
    app.add_middleware(Authenticate, settings=settings, sessions=app.state.sessions)
    app.add_middleware(GuardUnexpected)
    app.add_middleware(_RouteTiming, metrics=app.state.metrics)
    app.add_middleware(HttpGuards, settings=settings)  # outermost: Host allowlist and exposure before anything (http_guards)
    return app
