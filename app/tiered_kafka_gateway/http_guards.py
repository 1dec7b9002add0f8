"""What every HTTP answer of the gateway passes through before routing (issue 36): an ASGI middleware.

**Host allowlist** (DNS rebinding): loopback is not a boundary for a browser. A web page on
``attacker.example`` whose name an attacker re-points at 127.0.0.1 reaches the gateway with
``Host: attacker.example`` and reads the answers as same-origin. So, as Jupyter does, a request is
answered only when its ``Host`` header (port aside) is an IP literal (a browser that sent one was
pointed at that address, not at a name an attacker controls) or a name of the ``allowed_hosts``
setting (default ``["localhost"]``; ``"*.example.com"`` matches its subdomains; ``"*"`` any name,
for a gateway behind a load balancer that authenticates every caller). Anything else is 403
``host_not_allowed``, before routing: Starlette's slash redirect, which echoes the Host header in
its ``Location``, never sees it. A request without a Host header (HTTP/1.0) is answered: no
browser sends one.

**Exposure, in the app** (``config.check_exposure`` at every request): ``tiered-kafka-gateway``
refuses to start beyond loopback without authentication, but ``uvicorn tiered_kafka_gateway.asgi:app
--host 0.0.0.0`` never runs that check. So the app checks the address each request arrived on (the
ASGI ``server``: the local address of the connection): without ``auth.enabled`` or
``auth.allow_anonymous``, a request that did not arrive on a loopback address is 403
``anonymous_beyond_loopback`` naming the fix (logged once at ERROR), whatever started the app.

**Headers on every answer**: ``Cache-Control: no-store`` (answers carry data a token may read;
no proxy or browser cache keeps them), ``X-Content-Type-Options: nosniff``, ``X-Frame-Options:
DENY`` and ``Referrer-Policy: same-origin`` (the coverage pages are never framed: no clickjacking
of their forms; their URLs name topics).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from tiered_kafka_gateway.config import GatewaySettings, is_loopback
from tiered_kafka_gateway.errors import ErrorCode, error_response

log = logging.getLogger(__name__)

SECURITY_HEADERS = (
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # not no-referrer: Chromium then sends "Origin: null" on form POSTs (sessions)
)


def host_name(header: str) -> str:
    """The name of a Host header value, without its port, lowercased, without a trailing dot;
    an IPv6 literal without its brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    name, colon, port = header.rpartition(":")
    if colon and port.isdigit():
        header = name
    return header.rstrip(".")


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def host_allowed(name: str, allowed: list[str]) -> bool:
    """Whether ``host_name`` ``name`` is answered (module doc)."""
    if is_ip_literal(name) or "*" in allowed:
        return True
    return any(name == a or (a.startswith("*.") and name.endswith(a[1:])) for a in allowed)


def _arrived_on_loopback(address: str) -> bool:
    """``config.is_loopback`` of a connection's local address, an IPv4-mapped one (``--host ::``) unwrapped."""
    try:
        mapped = ipaddress.ip_address(address).ipv4_mapped  # type: ignore[union-attr]
    except (ValueError, AttributeError):
        mapped = None
    return is_loopback(str(mapped) if mapped is not None else address)


class HttpGuards:
    """ASGI middleware: the host allowlist, the exposure check and the headers of the module doc."""

    def __init__(self, app: Any, settings: GatewaySettings) -> None:
        self.app = app
        self.allowed = list(settings.allowed_hosts)
        self.open_beyond_loopback = settings.auth.enabled or settings.auth.allow_anonymous
        self._warned = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, self._with_headers(send))
            return
        await self.app(scope, receive, self._with_headers(send))

    def _refusal(self, scope: dict[str, Any]) -> Any:
        server = scope.get("server")
        # a unix socket's server has no port: local by construction (only its file's users reach it)
        if not self.open_beyond_loopback and server and server[1] is not None and not _arrived_on_loopback(str(server[0])):
            if not self._warned:
                self._warned = True
                log.error("a request arrived on %s, beyond loopback, and authentication is off: refused (auth.enabled or auth.allow_anonymous)", server[0])
            return error_response(
                ErrorCode.ANONYMOUS_BEYOND_LOOPBACK,
                "this gateway has no authentication and answers on loopback only: set auth.enabled with auth.tokens, "
                "or auth.allow_anonymous to serve every caller on purpose",
            )
        for name, value in scope.get("headers", ()):
            if name == b"host":
                host = host_name(value.decode("latin-1"))
                if not host_allowed(host, self.allowed):
                    return error_response(
                        ErrorCode.HOST_NOT_ALLOWED,
                        "the Host header names a host this gateway does not answer for: add it to allowed_hosts, or use an IP address",
                    )
                break
        return None

    @staticmethod
    def _with_headers(send: Any) -> Any:
        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                message["headers"] = [*message.get("headers", ()), *((n, v) for n, v in SECURITY_HEADERS if n not in present)]
            await send(message)

        return sending
