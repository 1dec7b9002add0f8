"""The ASGI entry point for uvicorn workers: the app built from the process's settings."""

from tiered_kafka_gateway.app import create_app
from tiered_kafka_gateway.config import cached_settings

app = create_app(cached_settings())
