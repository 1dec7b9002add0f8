"""The gateway's configuration: one typed source (environment, or a JSON file) per process.

Environment variables use the prefix ``TIERED_KAFKA_GATEWAY_`` and ``__`` for nesting; the
file (``TIERED_KAFKA_GATEWAY_CONFIG``, JSON) has the same structure, and the environment wins::

    clusters.{name}.redis_url                   redis://... of that cluster's registry (required)
    clusters.{name}.s3.bucket / prefix / entropy_bits / endpoint_url / region
    clusters.{name}.s3.access_key_id / secret_access_key   (default: boto3's credential chain)
    clusters.{name}.bootstrap_servers           Kafka, for broker offsets and proxied reads (optional)
    presign_ttl_s          300        lifetime of presigned URLs (max 3600)
    default_max_bytes      1 MiB      plan size when the request gives none
    max_bytes_limit        64 MiB     largest max_bytes a request may ask
    range_bytes            8 MiB      preferred size of one presigned range
    cache.* (every cache is bounded by the bytes it holds; ``caches`` module docstring):
    cache.index_bytes      64 MiB     .index/.timeindex objects
    cache.header_bytes     64 MiB     batch headers read from segments without a batch index
    cache.batch_index_bytes 256 MiB   batch indexes
    cache.sparse_index_bytes 32 MiB   sparse plan indexes parsed from registry entries
    cache.segment_bytes    32 MiB     registry lookups remembered (segment entries; last entries)
    cache.listing_bytes    16 MiB     S3 listings of partitions, found or not (unknown partitions too)
    cache.txn_index_bytes  32 MiB     parsed .txnindex files (the records endpoint)
    cache.listing_ttl_s    30         S3 listings of unregistered (Pinterest-layout) partitions
    cache.segment_ttl_s    2          registry lookups remembered (0: ask Redis every time)
    auth.enabled           false
    auth.tokens            {token: [topic regex, ...]}  bearer tokens or API keys (X-API-Key)
    kafka.max_concurrency  8          proxied Kafka reads at once; kafka.timeout_s 10
    timeouts.redis_s 2, timeouts.s3_s 5
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_settings import SettingsConfigDict

from tiered_kafka.errors import ConfigError
from tiered_kafka.service_support import EnvironmentFirstSettings, S3Location, check_regexes, describe_validation_error

ENV_PREFIX = "TIERED_KAFKA_GATEWAY_"
MIB = 1024 * 1024


class ClusterSettings(BaseModel):
    redis_url: str
    s3: S3Location
    bootstrap_servers: str | None = None


class CacheSettings(BaseModel):
    index_bytes: int = Field(64 * MIB, ge=4096)
    header_bytes: int = Field(64 * MIB, ge=4096)
    batch_index_bytes: int = Field(256 * MIB, ge=4096)
    sparse_index_bytes: int = Field(32 * MIB, ge=4096)
    segment_bytes: int = Field(32 * MIB, ge=4096)
    listing_bytes: int = Field(16 * MIB, ge=4096)
    txn_index_bytes: int = Field(32 * MIB, ge=4096)
    listing_ttl_s: float = Field(30.0, ge=0)
    segment_ttl_s: float = Field(2.0, ge=0, le=60)


class AuthSettings(BaseModel):
    enabled: bool = False
    tokens: dict[str, list[str]] = {}

    @field_validator("tokens")
    @classmethod
    def _patterns_compile(cls, tokens: dict[str, list[str]]) -> dict[str, list[str]]:
        for token, patterns in tokens.items():
            if len(token) < 16:
                raise ValueError("tokens must be at least 16 characters")
            check_regexes(patterns, "topic pattern")
        return tokens


class KafkaProxySettings(BaseModel):
    max_concurrency: int = Field(8, ge=1, le=256)
    timeout_s: float = Field(10.0, gt=0, le=120)


class TimeoutSettings(BaseModel):
    redis_s: float = Field(2.0, gt=0)
    s3_s: float = Field(5.0, gt=0)


class GatewaySettings(EnvironmentFirstSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

    clusters: dict[str, ClusterSettings]
    presign_ttl_s: int = Field(300, ge=1, le=3600)
    default_max_bytes: int = Field(MIB, ge=1)
    max_bytes_limit: int = Field(64 * MIB, ge=1)
    range_bytes: int = Field(8 * MIB, ge=4096)
    cache: CacheSettings = CacheSettings()
    auth: AuthSettings = AuthSettings()
    kafka: KafkaProxySettings = KafkaProxySettings()
    timeouts: TimeoutSettings = TimeoutSettings()

    @field_validator("clusters")
    @classmethod
    def _at_least_one(cls, clusters: dict[str, ClusterSettings]) -> dict[str, ClusterSettings]:
        if not clusters:
            raise ValueError("at least one cluster is required")
        for name in clusters:
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", name):
                raise ValueError(f"cluster name {name!r} must be 1-128 of [A-Za-z0-9._-]")
        return clusters


def load_settings(path: Path | None = None, **overrides: Any) -> GatewaySettings:
    """Settings from a JSON file (``path`` or $TIERED_KAFKA_GATEWAY_CONFIG), the environment, ``overrides``."""
    path = path or (Path(os.environ[f"{ENV_PREFIX}CONFIG"]) if os.environ.get(f"{ENV_PREFIX}CONFIG") else None)
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read gateway config {path}: {err}") from err
    values.update(overrides)
    try:
        return GatewaySettings(**values)
    except ValidationError as err:  # its own text would quote the inputs, secrets included
        raise ConfigError(f"invalid gateway configuration: {describe_validation_error(err)}") from None


@functools.cache
def cached_settings() -> GatewaySettings:
    """The process's settings, built once on first use (not at import)."""
    return load_settings()
