"""The FastAPI application: ``create_app(settings)``."""

from __future__ import annotations

import time

from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute

from tiered_kafka_gateway.config import GatewaySettings
from tiered_kafka_gateway.errors import install_handlers
from tiered_kafka_gateway.metrics import GatewayMetrics
from tiered_kafka_gateway.remote import ClusterReader
from tiered_kafka_gateway.routes import health, partitions, records

API_VERSION = "1.0.0"


def _operation_id(route: APIRoute) -> str:
    return route.name


def create_app(settings: GatewaySettings) -> FastAPI:
    app = FastAPI(
        title="tiered-kafka gateway",
        version=API_VERSION,
        description="Turns (topic, partition, offset) into presigned, batch-aligned S3 byte ranges of Kafka segments.",
        generate_unique_id_function=_operation_id,
    )
    app.state.settings = settings
    app.state.readers = {name: ClusterReader(name, cluster, settings) for name, cluster in settings.clusters.items()}
    app.state.metrics = GatewayMetrics()
    install_handlers(app)
    app.include_router(partitions.router)
    app.include_router(records.router)
    app.include_router(health.router)

    @app.middleware("http")
    async def _timing(request: Request, call_next):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        response: Response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        app.state.metrics.latency.labels(path, str(response.status_code)).observe(time.perf_counter() - start)
        return response

    return app
