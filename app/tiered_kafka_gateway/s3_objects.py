"""One cluster's S3 bucket as the gateway's readers use it: counted GETs, SigV4 presigning, readiness.

Both kinds of cluster reader (``remote.ClusterReader``, ``rsm_reader.RsmClusterReader``) are handed
one ``S3Objects`` (built in ``sources.build_source``), so a test hands them a fake client instead.
S3's failures are answered here, at the boundary, as the gateway's errors: a missing object is 502
``corrupt_remote_data`` (the registry or the metadata named it), any other failure 503
``storage_unavailable`` (its body without boto's text, which goes to the log: ``errors`` module doc). A ranged GET must be answered with the range asked (``Content-Range``):
a server or proxy that ignored ``Range`` would otherwise make the gateway buffer a whole segment
and read the wrong bytes; it is checked before the body is read, and the body is closed unread.

Presigned URLs are signed with botocore's SigV4 query signer directly: the same algorithm as
``generate_presigned_url``, without its per-call request pipeline (0.45 ms -> 0.13 ms). ``Range``
is a signed header, so a URL serves one byte range only.

**Segment bytes** (``get_range``: the planned ranges the Kafka listener forwards and ``/records``
decodes) are read through a presigned URL on the SDK's own receive path
(``tiered_kafka.client.http.StdlibTransport``: ``http.client`` straight into pooled memory) when the
endpoint is ``http://``: boto3's ``get_object`` spent 0.88 CPU-s per GB of 8 MiB ranges against
SeaweedFS, the direct read 0.30 (issue 35: the listener's CPU per GB). Other endpoints (``https://``,
real S3) and small objects (indexes) go through boto3. The same answers either way: 404 is
``corrupt_remote_data`` (missing), another status or a network failure ``storage_unavailable``,
a ``Content-Range`` other than the range asked ``corrupt_remote_data``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import quote

from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
import httpx
from botocore.exceptions import BotoCoreError, ClientError

from tiered_kafka.client.http import StdlibTransport
from tiered_kafka.format import record_batch
from tiered_kafka.read_plan import ByteRange
from tiered_kafka_service.support import s3_client
from tiered_kafka_gateway.config import GatewaySettings
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, hidden_failure


DIRECT_URL_TTL_S = 300
"""Lifetime of the URLs ``get_range`` signs for its own reads (used at once)."""


class S3Objects:
    """GETs, presigned URLs and a readiness check on one bucket, counted for ``/metrics``."""

    def __init__(self, client: Any, bucket: str, endpoint_url: str | None, region: str, *, direct: bool = False, timeout_s: float = 30.0) -> None:
        self.client = client
        self.bucket = bucket
        endpoint = (endpoint_url or f"https://s3.{region}.amazonaws.com").rstrip("/")
        # the direct ranged read (module doc, "Segment bytes"; ``direct``: the endpoint is the client's own, as
        # ``connect`` makes it): http:// endpoints, with the SDK's compiled receive
        self._direct = StdlibTransport() if direct and endpoint.startswith("http://") and record_batch._native is not None else None
        self._timeout_s = timeout_s
        self._object_url_prefix = f"{endpoint}/{quote(bucket, safe='')}/"
        self._region = region
        self.gets = 0
        self.gets_by_kind: Counter[str] = Counter()  # file kind ("index", "log", "batchindex", ...) -> GETs
        self.presigns = 0

    @classmethod
    def connect(cls, location: Any, bucket: str, settings: GatewaySettings) -> S3Objects:
        """A client for ``location`` (an ``S3Location``) with the gateway's timeouts and pool size."""
        client = s3_client(location, connect_timeout_s=settings.timeouts.s3_s, read_timeout_s=settings.timeouts.s3_s, max_pool_connections=32)
        return cls(client, bucket, location.endpoint_url, location.region, direct=True, timeout_s=settings.timeouts.s3_s)

    def close(self) -> None:
        self.client.close()  # botocore: closes the endpoint's urllib3 pool
        if self._direct is not None:
            self._direct.close()

    def get(self, key: str, byte_range: str | None = None) -> bytes:
        """The object's bytes (``byte_range``: an HTTP ``Range`` value), one counted GET."""
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if byte_range:
            params["Range"] = byte_range
        try:
            self.gets += 1
            self.gets_by_kind[key.rsplit(".", 1)[-1]] += 1
            response = self.client.get_object(**params)
            if byte_range:
                _check_content_range(key, byte_range, response)
            return response["Body"].read()  # type: ignore[no-any-return]
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"s3://{self.bucket}/{key} is missing") from err
            raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 read of {key} failed: {err}") from err
        except BotoCoreError as err:
            raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 is unavailable: {err}") from err

    def get_range(self, key: str, byte_range: ByteRange) -> bytes | memoryview:
        """The bytes of one planned range, one counted GET (module doc, "Segment bytes"): a read-only
        memoryview of pooled memory on an ``http://`` endpoint, else bytes."""
        if self._direct is None:
            return self.get(key, byte_range.http_range)
        self.gets += 1
        self.gets_by_kind[key.rsplit(".", 1)[-1]] += 1
        where = f"S3 read of {key} ({byte_range.http_range})"
        try:
            answered = self._direct.get(self.presign(key, byte_range, DIRECT_URL_TTL_S, counted=False), {"Range": byte_range.http_range}, self._timeout_s)
            assert answered is not None  # an http:// URL (checked when _direct was made)
            response, body = answered
            try:
                if response.status == 404:
                    raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"s3://{self.bucket}/{key} is missing")
                if response.status != 206:
                    hidden = hidden_failure("s3", f"{where}: HTTP {response.status} {response.reason}")
                    raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 read of {key} failed (HTTP {response.status}, error id {hidden})")
                got = response.getheader("Content-Range") or ""
                if not got.startswith(f"bytes {byte_range.start}-{byte_range.end - 1}/"):
                    raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"S3 answered the ranged GET of {key} ({byte_range.http_range}) with "
                                       f"Content-Range {got or 'absent'}: the range was not honoured")
                return body.read_pooled()
            finally:
                body.close()
        except httpx.HTTPError as err:
            raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 is unavailable (error id {hidden_failure('s3', f'{where}: {err}')})") from err

    def presign(self, key: str, byte_range: ByteRange, ttl_s: int, *, counted: bool = True) -> str:
        """A SigV4 URL for one object and one byte range (Range is a signed header); ``counted``: in
        ``presigns`` (the URLs handed out; not those of ``get_range``'s own reads)."""
        self.presigns += counted
        request = AWSRequest(method="GET", url=f"{self._object_url_prefix}{quote(key, safe='/~')}", headers={"Range": byte_range.http_range})
        S3SigV4QueryAuth(self._credentials(), "s3", self._region, expires=ttl_s).add_auth(request)
        return request.url  # type: ignore[no-any-return]

    def _credentials(self) -> Any:
        """Current credentials (refreshed by botocore when they rotate)."""
        return self.client._request_signer._credentials.get_frozen_credentials()

    def pages(self, prefix: str) -> Any:
        """``list_objects_v2`` pages under ``prefix`` (a failure while iterating: 503 ``storage_unavailable``)."""
        try:
            yield from self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        except (ClientError, BotoCoreError) as err:
            raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 listing of {prefix} failed: {err}") from err

    def check(self) -> str:
        """"ok", or why the bucket does not answer (``/readyz``)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return "ok"
        except (ClientError, BotoCoreError) as err:  # the detail goes to the log only (errors module doc)
            return f"unavailable (error id {hidden_failure('s3', f'HEAD bucket {self.bucket}: {err}')})"


class CountsS3:
    """The S3 counts a reader reports (``/metrics``, tests, benchmarks), from its ``objects``."""

    objects: S3Objects

    @property
    def s3_gets(self) -> int:
        return self.objects.gets

    @property
    def s3_gets_by_kind(self) -> Counter[str]:
        return self.objects.gets_by_kind

    @property
    def presigns(self) -> int:
        return self.objects.presigns


def _check_content_range(key: str, byte_range: str, response: dict[str, Any]) -> None:
    """A ranged GET must be answered 206 with the asked range (``Content-Range: bytes a-b/size``): module docstring."""
    asked = byte_range.removeprefix("bytes=")
    got = response.get("ContentRange") or ""
    if not got.startswith(f"bytes {asked}/"):
        response["Body"].close()
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        raise GatewayError(
            ErrorCode.CORRUPT_REMOTE_DATA,
            f"S3 answered the ranged GET of {key} ({byte_range}) with HTTP {status} and Content-Range {got or 'absent'}: the range was not honoured",
        )
