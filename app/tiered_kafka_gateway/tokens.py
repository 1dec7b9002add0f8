"""The one authentication rule of the gateway: a token and what it may read (issue 36).

Every way in authenticates here: the HTTP API's bearer token or ``X-API-Key`` (``deps.Authenticate``),
the coverage pages' session cookie (``sessions``: the cookie names a token by its fingerprint, and the
token's grant applies to the pages exactly as to the API), and the Kafka-protocol listener's SASL/PLAIN
password (``kafka_listener.sasl``). Each hands its token to :meth:`TokenBook.access` and gets the
caller's :class:`Access`, or None.

* **Authentication**: the token is compared with every configured one in constant time
  (``hmac.compare_digest``, every token compared: the time taken does not depend on which matched).
* **Authorization**: ``Access`` holds the token's grant (``config.TokenGrant``): topic regexes (full
  match) on the clusters it names (none named: every cluster), whether it may read ``/metrics``
  (``metrics``: decision below), and the consumer group ids it may use through the Kafka listener
  (``groups``, regexes, full match; decision: none unless named, as Kafka's authorizer allows no group
  without a Group ACL: a read token must not join, and rebalance, another team's group or move its
  committed offsets; ``[".*"]`` for every group). The groups live in Kafka, where the gateway's own
  Kafka credentials act for the token (``kafka_listener.groups``).

``/metrics`` **and scopes** (decision): the metrics are labelled by cluster and by route, and a
multi-worker server's are merged from prometheus_client's files; filtering series by a token's
clusters would be a second, partial authorization rule over text. So ``/metrics`` is served only to a
token whose grant says ``"metrics": true`` (a Prometheus scrape token, which may name no topic:
``{"topics": [], "metrics": true}``); any other token is answered 403 ``metrics_not_authorized``, as is
a session cookie. With authentication off every caller reads everything, ``/metrics`` included.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any

from tiered_kafka_gateway.config import GatewaySettings


@dataclass(frozen=True)
class Access:
    """What a caller may read (module doc). ``patterns`` None: every topic (authentication off)."""

    patterns: tuple[re.Pattern[str], ...] | None
    clusters: frozenset[str] | None = None  # None: every cluster
    metrics: bool = True  # may read /metrics (module doc; authentication off: True)
    fingerprint: str = ""  # the token's fingerprint (``TokenBook.fingerprint``; "" without a token)
    groups: tuple[re.Pattern[str], ...] | None = None  # consumer group ids it may use through the Kafka listener; None: every one

    def allows(self, topic: str) -> bool:
        return self.patterns is None or any(p.fullmatch(topic) for p in self.patterns)

    def may_use_group(self, group: str) -> bool:
        """Whether the token may join, commit to or read the offsets of consumer group ``group`` (module doc)."""
        return self.groups is None or any(p.fullmatch(group) for p in self.groups)

    def sees(self, cluster: str) -> bool:
        return self.clusters is None or cluster in self.clusters


EVERYTHING = Access(None)
"""The access of every caller while authentication is off."""


class TokenBook:
    """The configured tokens and their grants (module doc); built once per app or listener."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.enabled = settings.auth.enabled
        self._tokens: list[tuple[bytes, Access]] = []
        self._by_fingerprint: dict[str, Access] = {}
        for known, grant in settings.auth.tokens.items():
            access = Access(
                tuple(re.compile(p) for p in grant.topics),
                None if grant.clusters is None else frozenset(grant.clusters),
                grant.metrics,
                self.fingerprint(known.encode()),
                tuple(re.compile(p) for p in grant.groups),
            )
            self._tokens.append((known.encode(), access))
            self._by_fingerprint[access.fingerprint] = access

    def __repr__(self) -> str:
        return f"TokenBook(enabled={self.enabled}, tokens={len(self._tokens)})"  # never a token

    @staticmethod
    def fingerprint(token: bytes) -> str:
        """A token's name in a session cookie: SHA-256 of it, hex, first 32 characters (the token
        itself never leaves the request that carried it)."""
        return hashlib.sha256(b"tiered-kafka-gateway token\0" + token).hexdigest()[:32]

    def access(self, token: bytes | str | None) -> Access | None:
        """The caller's access: everything while authentication is off; else the token's grant, or
        None for a missing or unknown token (constant time over every configured token)."""
        if not self.enabled:
            return EVERYTHING
        if token is None:
            return None
        given = token.encode() if isinstance(token, str) else token
        found = None
        for known, grant in self._tokens:  # every token compared: the time taken does not depend on which matched
            if hmac.compare_digest(known, given):
                found = grant
        return found

    def by_fingerprint(self, fingerprint: str) -> Access | None:
        """The grant of the token of that fingerprint (a session cookie's), None when no configured
        token has it (the token was removed: its sessions end)."""
        return self._by_fingerprint.get(fingerprint)


PUBLIC_OPERATIONS = frozenset({"health", "ready", "readRsmRange"})
"""Operations answered without a token (``deps.PUBLIC_PATHS``; rsm-ranges: the signed URL is the credential)."""


def declare_security(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (the app's OpenAPI description) declaring how a caller authenticates: a bearer
    token or ``X-API-Key``, on every operation but the public ones (issue 36: the description
    declared no security scheme)."""
    schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes["bearerToken"] = {"type": "http", "scheme": "bearer", "description": "a token of auth.tokens (when auth.enabled)"}
    schemes["apiKey"] = {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "the same token, as an API key"}
    schema["security"] = [{"bearerToken": []}, {"apiKey": []}]
    for methods in schema.get("paths", {}).values():
        for operation in methods.values():
            if isinstance(operation, dict) and operation.get("operationId") in PUBLIC_OPERATIONS:
                operation["security"] = []
    return schema
