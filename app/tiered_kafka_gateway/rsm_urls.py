"""Byte-range URLs of the gateway for encrypted RSM segments, scoped like presigned S3 URLs.

An encrypted segment's plan cannot hand out S3 URLs (the client would get ciphertext and would need
the key), so each range's ``url`` points at the gateway itself (``routes.rsm_ranges``), which reads
the chunks, decrypts them and serves the *original* bytes. Like a SigV4 presigned URL, the URL is
the credential, bound to one object and one byte range, valid for ``rsm_url_ttl_s``::

    {public_url}/rsm-ranges/v1/{cluster}/{log key}?start={start}&end={end}&expires={epoch s}&signature={sig}
    sig = base64url(HMAC-SHA256(rsm_url_secret, "v1\\n{cluster}\\n{log key}\\n{start}\\n{end}\\n{expires}"))

The client sends ``Range: bytes={start}-{end-1}`` (the plan's ``range_header``) and gets a 206 with
``Content-Range: bytes {start}-{end-1}/{original .log size}``, as from S3. The path is outside the
token check (``deps.PUBLIC_PREFIXES``): the signature proves the plan was granted to a caller allowed to
read the topic, as a presigned URL does. A bad or expired signature, or another range, is 403
``rsm_url_refused``; a client re-plans on it as on an expired presigned URL.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import quote

from tiered_kafka_gateway.errors import ErrorCode, GatewayError

PATH_PREFIX = "/rsm-ranges/v1/"


def _signature(secret: bytes, cluster: str, key: str, start: int, end: int, expires: int) -> str:
    message = f"v1\n{cluster}\n{key}\n{start}\n{end}\n{expires}".encode()
    return base64.urlsafe_b64encode(hmac.new(secret, message, hashlib.sha256).digest()).decode("ascii").rstrip("=")


def signed_url(public_url: str, secret: bytes, cluster: str, key: str, start: int, end: int, ttl_s: int) -> str:
    expires = int(time.time()) + ttl_s
    sig = _signature(secret, cluster, key, start, end, expires)
    return f"{public_url.rstrip('/')}{PATH_PREFIX}{quote(cluster, safe='')}/{quote(key, safe='/')}?start={start}&end={end}&expires={expires}&signature={sig}"


REFUSED_MESSAGE = "the byte-range URL's signature does not match a KIP-405 cluster, object and range of this gateway"


def refused() -> GatewayError:
    """The one answer to a URL that this gateway did not sign for one of its KIP-405 clusters: a bad
    signature, an unknown cluster and a cluster of another kind alike (``routes.rsm_ranges``)."""
    return GatewayError(ErrorCode.RSM_URL_REFUSED, REFUSED_MESSAGE)


def verify(secret: bytes | None, cluster: str, key: str, start: int, end: int, expires: int, signature: str) -> None:
    """``GatewayError`` rsm_url_refused unless ``signature`` signs exactly these values and has not
    expired; ``secret`` None (the gateway signs no URLs) refuses every URL, after the same work."""
    # bytes, not str: compare_digest refuses a str with non-ASCII characters (TypeError), and the
    # signature is whatever the caller put in the query
    expected = _signature(secret or b"", cluster, key, start, end, expires).encode()
    if not hmac.compare_digest(expected, signature.encode("utf-8", "surrogatepass")) or secret is None:
        raise refused()
    if expires < time.time():
        raise GatewayError(ErrorCode.RSM_URL_REFUSED, "the byte-range URL has expired: plan again")
