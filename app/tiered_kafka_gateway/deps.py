"""Shared FastAPI dependencies: settings, the cluster readers, and the caller's topic access.

The dependencies are ``async def``: they never block, and FastAPI would otherwise hop to its
thread pool for each one (the endpoints, which do block on Redis and S3, stay sync).

Access control (``auth.enabled``): a token arrives as ``Authorization: Bearer <token>`` or
``X-API-Key: <token>`` and maps to topic regexes (full match). It is checked before any lookup,
presign or proxied read; a topic the token may not read is answered 404, as if absent.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path, Request

from tiered_kafka_gateway.config import GatewaySettings
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.remote import ClusterReader


@dataclass(frozen=True)
class Access:
    patterns: tuple[re.Pattern[str], ...] | None  # None: every topic (auth disabled)

    def allows(self, topic: str) -> bool:
        return self.patterns is None or any(p.fullmatch(topic) for p in self.patterns)


async def settings(request: Request) -> GatewaySettings:
    return request.app.state.settings


async def readers(request: Request) -> dict[str, ClusterReader]:
    return request.app.state.readers


async def access(
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    x_api_key: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Access:
    config: GatewaySettings = request.app.state.settings
    if not config.auth.enabled:
        return Access(None)
    token = x_api_key
    if authorization and authorization.lower().startswith("bearer "):
        token = authorization[7:].strip()
    for known, patterns in config.auth.tokens.items():
        if token is not None and hmac.compare_digest(known.encode(), token.encode()):
            return Access(tuple(re.compile(p) for p in patterns))
    raise GatewayError(ErrorCode.UNAUTHORIZED, "a valid bearer token or X-API-Key is required")


async def cluster(
    request: Request,
    name: Annotated[str, Path(alias="cluster", pattern=r"^[A-Za-z0-9._-]{1,128}$", description="cluster name")],
) -> ClusterReader:
    reader = request.app.state.readers.get(name)
    if reader is None:
        raise GatewayError(ErrorCode.UNKNOWN_CLUSTER, f"unknown cluster {name!r}")
    return reader


async def readable_topic(
    topic: Annotated[str, Path(pattern=r"^[A-Za-z0-9._-]{1,249}$", description="topic name")],
    caller: Annotated[Access, Depends(access)],
) -> str:
    if not caller.allows(topic):
        raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}")
    return topic


Cluster = Annotated[ClusterReader, Depends(cluster)]
Topic = Annotated[str, Depends(readable_topic)]
Caller = Annotated[Access, Depends(access)]
Settings = Annotated[GatewaySettings, Depends(settings)]
PartitionId = Annotated[int, Path(ge=0, le=2**31 - 1, description="partition number")]
