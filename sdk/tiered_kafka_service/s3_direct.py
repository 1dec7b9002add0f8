"""Signed S3 requests without botocore's per-call pipeline: presigned URLs, and the direct HEAD and
ranged GET of the agent's and the gateway's hot paths.

A botocore call costs about a millisecond of CPU (its request pipeline, event hooks, response
parsing): measured against SeaweedFS, 1.4 ms of client CPU per HEAD in ``rebuild-registry`` (646
segments/s) and 0.88 CPU-s per GB of 8 MiB ranged GETs in the gateway. A SigV4 query-signed URL
(botocore's ``S3SigV4QueryAuth``, the algorithm of ``generate_presigned_url`` without its pipeline)
costs about 0.13 ms to sign, and ``http.client`` (the SDK's ``StdlibTransport``, into pooled memory
for bodies) a few tens of microseconds to send. So:

* :class:`SignedUrls` signs URLs (the gateway's presigned ranges handed to clients, and these requests);
* :class:`DirectS3` sends HEAD and ranged GET requests on such URLs itself, for ``http://`` endpoints
  (an S3-compatible server beside the cluster). Anything else (``https://``: real S3, TLS) goes through
  the boto3 client as before: :meth:`DirectS3.of` answers None.

Answers are botocore's where a caller already handles them: a status other than 200/206 raises
``botocore.exceptions.ClientError`` with the status as its code ("404", as boto3 raises for a HEAD),
so ``tiered_kafka.retry`` retries 5xx and callers' ``except ClientError`` stay as they are; a network
failure is httpx's (transient in ``tiered_kafka.retry``).
"""

from __future__ import annotations

import http.client
from typing import Any
from urllib.parse import quote

from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import ClientError

from tiered_kafka.client.http import StdlibTransport

META_HEADER = "x-amz-meta-"
URL_TTL_S = 300
"""Lifetime of the URLs :class:`DirectS3` signs for its own requests (used at once)."""


class SignedUrls:
    """SigV4 query-signed URLs for objects of one bucket (path-style, as ``support.s3_client`` addresses it)."""

    def __init__(self, client: Any, bucket: str, endpoint_url: str | None = None, region: str | None = None) -> None:
        self.client = client
        self.bucket = bucket
        self.region = region or client.meta.region_name or "us-east-1"
        endpoint = (endpoint_url or client.meta.endpoint_url or f"https://s3.{self.region}.amazonaws.com").rstrip("/")
        self.endpoint = endpoint
        self._object_url_prefix = f"{endpoint}/{quote(bucket, safe='')}/"

    def url(self, key: str, ttl_s: int, *, method: str = "GET", headers: dict[str, str] | None = None) -> str:
        """A URL for ``method`` on ``key``; ``headers`` (e.g. ``Range``) are signed: the URL serves those only."""
        request = AWSRequest(method=method, url=f"{self._object_url_prefix}{quote(key, safe='/~')}", headers=headers or {})
        S3SigV4QueryAuth(self._credentials(), "s3", self.region, expires=ttl_s).add_auth(request)
        return request.url  # type: ignore[no-any-return]

    def _credentials(self) -> Any:
        """Current credentials (refreshed by botocore when they rotate)."""
        return self.client._request_signer._credentials.get_frozen_credentials()


class DirectS3:
    """HEAD and ranged GET on signed URLs through ``http.client`` (module doc); ``http://`` endpoints only."""

    def __init__(self, urls: SignedUrls, timeout_s: float) -> None:
        self.urls = urls
        self.timeout_s = timeout_s
        self._transport = StdlibTransport()

    @classmethod
    def of(cls, client: Any, bucket: str, timeout_s: float, endpoint_url: str | None = None, region: str | None = None) -> DirectS3 | None:
        """A direct path to ``bucket`` when its endpoint is ``http://``; None otherwise (use the client)."""
        urls = SignedUrls(client, bucket, endpoint_url, region)
        return cls(urls, timeout_s) if urls.endpoint.startswith("http://") else None

    def close(self) -> None:
        self._transport.close()

    def head(self, key: str) -> tuple[int, dict[str, str]]:
        """(size, user metadata with lower-case names, without ``x-amz-meta-``), as ``head_object``'s
        ``ContentLength`` and ``Metadata``; a status other than 200 raises ``ClientError`` (module doc)."""
        response, body = self._send("HEAD", key, {})
        try:
            response.read()  # nothing: marks the response done, so the connection is reused
            self._check(response, key, "HeadObject", 200)
            metadata = {name[len(META_HEADER):].lower(): value for name, value in response.getheaders() if name.lower().startswith(META_HEADER)}
            return int(response.getheader("Content-Length") or 0), metadata
        finally:
            body.close()

    def get_range(self, key: str, start: int, end: int) -> tuple[bytes | memoryview, str]:
        """Bytes [start, end) of ``key`` (a read-only memoryview of pooled memory, or bytes) and the answer's
        ``Content-Range``, which the caller checks; a status other than 206 raises ``ClientError``."""
        byte_range = f"bytes={start}-{end - 1}"
        response, body = self._send("GET", key, {"Range": byte_range})
        try:
            self._check(response, key, "GetObject", 206)
            return body.read_pooled(), response.getheader("Content-Range") or ""
        finally:
            body.close()

    def _send(self, method: str, key: str, headers: dict[str, str]) -> tuple[http.client.HTTPResponse, Any]:
        sent = self._transport.send(method, self.urls.url(key, URL_TTL_S, method=method, headers=headers), headers, self.timeout_s)
        assert sent is not None  # an http:// endpoint (``of``)
        return sent

    @staticmethod
    def _check(response: http.client.HTTPResponse, key: str, operation: str, expected: int) -> None:
        if response.status != expected:
            status = response.status
            raise ClientError({"Error": {"Code": str(status), "Message": f"{response.reason} ({key})"},
                               "ResponseMetadata": {"HTTPStatusCode": status}}, operation)
