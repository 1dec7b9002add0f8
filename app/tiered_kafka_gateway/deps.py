"""Shared FastAPI dependencies: settings, the cluster readers, and the caller's topic access.

The dependencies are ``async def``: they never block, and FastAPI would otherwise hop to its
thread pool for each one (the endpoints, which do block on Redis and S3, stay sync).

Access control (``auth.enabled``) has two steps, in Kafka's order:

1. **Authentication**, before anything else (``Authenticate``, an ASGI middleware, so it runs
   before routing, parameter validation and every lookup): a token arrives as
   ``Authorization: Bearer <token>`` or ``X-API-Key: <token>``. Without a valid one, every path
   but the probes (:data:`PUBLIC_PATHS`) is answered 401 with one and the same body: an existing
   cluster, an unknown one and an unrouted path look alike (DESIGN.md, contract 6).
2. **Authorization**, per cluster, then per topic: a token maps to topic regexes (full match) and,
   optionally, to the clusters it may see (``config.TokenGrant``; none named: every cluster, as
   before clusters could be named). Its topic patterns apply on those clusters only. A cluster the
   token may not see answers exactly as a cluster that does not exist (404 ``unknown_cluster``, the
   same message), and ``/v1/clusters`` lists only the clusters it may see (``visible_clusters``):
   a token learns nothing of the others, not even that they exist. A topic-scoped request
   (partition, plan, records, offsets) for a topic no pattern covers is 403
   ``topic_authorization_failed`` (Kafka's TOPIC_AUTHORIZATION_FAILED), whether or not the topic
   exists, before any lookup, presign or proxied read.

Topic *listings* list only the topics the caller may read, as Kafka's Metadata response leaves out
topics the principal may not Describe. That is filtering a list the caller asked for, not hiding
data it asked for: a caller that names a topic gets the 403.

The probes need no token: ``/healthz``; ``/readyz``, which names the clusters in its body only for
an authenticated caller (a load balancer without a token sees the status alone); the OpenAPI
description, and the login and logout pages of the coverage pages (``sessions``). ``/metrics``
(cluster names are its labels) needs, when auth is enabled, a token whose grant says ``"metrics":
true`` (Prometheus sends it with ``authorization:`` in the scrape config; ``tokens`` module doc: the
decision); any other token gets 403 ``metrics_not_authorized``. The pages under ``/ui/`` also accept
the session cookie of the browser login (``sessions``), with the grant of the token it was issued
for; without credentials they answer 401 with a link to the login page.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Request

from tiered_kafka.topic_names import topic_name_problem
from tiered_kafka_gateway.config import CLUSTER_NAME, GatewaySettings
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, error_response, topic_authorization_failed
from tiered_kafka_gateway.sessions import LOGIN_PATH, LOGOUT_PATH, SESSION_COOKIE, Sessions, cookie_of, login_required_page
from tiered_kafka_gateway.sources import ClusterSource
from tiered_kafka_gateway.tokens import Access, TokenBook
from tiered_kafka_gateway.ui import UI_PREFIX

__all__ = ["Access", "Authenticate", "visible_clusters"]  # Access lives in tokens (the one rule); re-exported here
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", LOGIN_PATH, LOGOUT_PATH})
PUBLIC_PREFIXES = ("/rsm-ranges/v1/",)  # signed byte-range URLs: the URL is the credential (rsm_urls)
_ACCESS_KEY = "tiered_kafka_gateway.access"  # where Authenticate leaves the caller's Access in the ASGI scope
UNAUTHENTICATED_MESSAGE = "a valid bearer token or X-API-Key is required"


def visible_clusters(settings: GatewaySettings, caller: Access) -> list[str]:
    """The configured clusters the caller may see, sorted (``/v1/clusters``, the coverage index)."""
    return sorted(name for name in settings.clusters if caller.sees(name))


class Authenticate:
    """ASGI middleware: step 1 of the module docstring; leaves the caller's ``Access`` (or None,
    unauthenticated on a public path) in the scope for the ``access`` dependency."""

    def __init__(self, app: Any, settings: GatewaySettings, sessions: Sessions | None = None) -> None:
        self.app = app
        self.enabled = settings.auth.enabled
        self.book = TokenBook(settings)  # the one token rule (tokens module doc)
        self.sessions = sessions

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            access = self.book.access(None) if not self.enabled else self._authenticate(scope)
            path = scope.get("path", "")
            if access is None and path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIXES):
                if self.sessions is not None and self.sessions.enabled and _is_page(path):
                    await login_required_page()(scope, receive, send)  # a browser: the way in (sessions)
                else:
                    await error_response(ErrorCode.UNAUTHORIZED, UNAUTHENTICATED_MESSAGE)(scope, receive, send)
                return
            scope[_ACCESS_KEY] = access
        await self.app(scope, receive, send)

    def _authenticate(self, scope: dict[str, Any]) -> Access | None:
        """The header's token's access; on a page without one, the session cookie's (``sessions``)."""
        token: bytes | None = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                token = value[7:].strip()
                break
            if name == b"x-api-key" and token is None:
                token = value
        if token is None:
            if self.sessions is not None and _is_page(scope.get("path", "")):
                return self.sessions.access(cookie_of(scope.get("headers", ()), SESSION_COOKIE))
            return None
        return self.book.access(token)


def _is_page(path: str) -> bool:
    """A coverage page (the session cookie authenticates those only: ``sessions`` module doc)."""
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


async def settings(request: Request) -> GatewaySettings:
    return request.app.state.settings


async def readers(request: Request) -> dict[str, ClusterSource]:
    return request.app.state.readers


def caller_of(request: Request) -> Access | None:
    """The caller's access as ``Authenticate`` found it (None: unauthenticated, on a public path)."""
    return request.scope.get(_ACCESS_KEY)


async def access(request: Request) -> Access:
    found = caller_of(request)
    if found is None:  # only reachable on a public path that asks for it: refuse like everywhere else
        raise GatewayError(ErrorCode.UNAUTHORIZED, UNAUTHENTICATED_MESSAGE)
    return found


async def cluster(
    request: Request,
    name: Annotated[str, Path(alias="cluster", pattern=f"^{CLUSTER_NAME}$", description="cluster name")],
) -> ClusterSource:
    """The named cluster's source; one the caller may not see is an unknown one (module docstring)."""
    reader = request.app.state.readers.get(name)
    caller = caller_of(request)
    if reader is None or caller is None or not caller.sees(name):
        raise GatewayError(ErrorCode.UNKNOWN_CLUSTER, f"unknown cluster {name!r}")
    return reader


async def readable_topic(
    topic: Annotated[str, Path(pattern=r"^[A-Za-z0-9._-]{1,249}$", description="topic name (Kafka's rule: 1-249 of [A-Za-z0-9._-], not '.' or '..')")],
    caller: Annotated[Access, Depends(access)],
) -> str:
    problem = topic_name_problem(topic)  # Kafka's rule, the one check (tiered_kafka.topic_names): before any lookup
    if problem is not None:
        raise GatewayError(ErrorCode.INVALID_REQUEST, problem)
    if not caller.allows(topic):
        raise topic_authorization_failed(topic)
    return topic


Cluster = Annotated[ClusterSource, Depends(cluster)]
Topic = Annotated[str, Depends(readable_topic)]
Caller = Annotated[Access, Depends(access)]
Settings = Annotated[GatewaySettings, Depends(settings)]
PartitionId = Annotated[int, Path(ge=0, le=2**31 - 1, description="partition number")]
