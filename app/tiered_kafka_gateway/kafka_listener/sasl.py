"""SASL/PLAIN with the gateway's tokens (``SaslHandshakeRequest.json`` api key 17, ``SaslAuthenticateRequest.json`` api key 36).

With ``auth.enabled``, a connection authenticates before anything but ApiVersions and
SaslHandshake (any other request first closes it, as a Kafka SASL listener does). The mechanism is
PLAIN (RFC 4616: ``authzid NUL authcid NUL passwd``): the password is one of the gateway's tokens,
the user name is free (``sasl.username`` of any client; logged nowhere). The token is checked by
the HTTP side's own rule (``deps.Authenticate``: every token compared in constant time), and its
grant applies as over HTTP: a token whose ``clusters`` leave this cluster out fails authentication
as an unknown token would; its topic patterns scope Metadata, ListOffsets and Fetch
(TOPIC_AUTHORIZATION_FAILED outside them). A failed authentication answers
SASL_AUTHENTICATION_FAILED (58) and closes the connection. SaslHandshake v0 (the raw token frame
that follows it, Kafka's pre-KIP-152 framing) is accepted too.

Without ``auth.enabled`` every connection reads every topic; a SASL handshake is then answered
UNSUPPORTED_SASL_MECHANISM with no mechanism listed.
"""

from __future__ import annotations

from collections.abc import Callable

from tiered_kafka_gateway.config import GatewaySettings
from tiered_kafka_gateway.deps import Access, Authenticate

MECHANISM = "PLAIN"


def token_check(settings: GatewaySettings) -> Callable[[str], Access | None] | None:
    """The HTTP side's token rule as a function of the token; None when authentication is off."""
    if not settings.auth.enabled:
        return None
    gate = Authenticate(None, settings)  # the one token check (deps), fed the token as a bearer header

    def check(token: str) -> Access | None:
        return gate._authenticate({"headers": [(b"authorization", b"Bearer " + token.encode())]})

    return check


def plain_password(auth_bytes: bytes) -> str | None:
    """The password of a PLAIN message (module docstring), None when malformed."""
    parts = auth_bytes.split(b"\x00")
    if len(parts) != 3:
        return None
    try:
        return parts[2].decode()
    except UnicodeDecodeError:
        return None


def authenticate(check: Callable[[str], Access | None], cluster: str, auth_bytes: bytes) -> Access | None:
    password = plain_password(auth_bytes)
    if password is None:
        return None
    access = check(password)
    if access is None or not access.sees(cluster):
        return None
    return access
