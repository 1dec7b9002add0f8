"""One cluster's S3 bucket as the gateway's readers use it: counted GETs, SigV4 presigning, readiness.

Both kinds of cluster reader (``remote.ClusterReader``, ``rsm_reader.RsmClusterReader``) are handed
one ``S3Objects`` (built in ``sources.build_source``), so a test hands them a fake client instead.
S3's failures are answered here, at the boundary, as the gateway's errors: a missing object is 502
``corrupt_remote_data`` (the registry or the metadata named it), any other failure 503
``storage_unavailable`` (its body without boto's text, which goes to the log: ``errors`` module doc). A ranged GET must be answered with the range asked (``Content-Range``):
a server or proxy that ignored ``Range`` would otherwise make the gateway buffer a whole segment
and read the wrong bytes; it is checked before the body is read, and the body is closed unread.

Presigned URLs are signed with botocore's SigV4 query signer directly
(``tiered_kafka_service.s3_direct.SignedUrls``): the same algorithm as ``generate_presigned_url``,
without its per-call request pipeline (0.45 ms -> 0.13 ms). ``Range`` is a signed header, so a URL
serves one byte range only.

**Segment bytes** (``get_range``: the planned ranges the Kafka listener forwards and ``/records``
decodes) are read through a presigned URL on the SDK's own receive path
(``tiered_kafka_service.s3_direct.DirectS3``: ``http.client`` straight into pooled memory) when the
endpoint is ``http://``: boto3's ``get_object`` spent 0.88 CPU-s per GB of 8 MiB ranges against
SeaweedFS, the direct read 0.30 (issue 35: the listener's CPU per GB). Other endpoints (``https://``,
real S3) and small objects (indexes) go through boto3. The same answers either way: 404 is
``corrupt_remote_data`` (missing), another status or a network failure ``storage_unavailable``,
a ``Content-Range`` other than the range asked ``corrupt_remote_data``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
from botocore.exceptions import BotoCoreError, ClientError

from tiered_kafka.format import record_batch
from tiered_kafka.read_plan import ByteRange
from tiered_kafka_service.s3_direct import DirectS3, SignedUrls
from tiered_kafka_service.support import s3_client
from tiered_kafka_gateway.config import GatewaySettings
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, hidden_failure


class S3Objects:
    """GETs, presigned URLs and a readiness check on one bucket, counted for ``/metrics``."""

    def __init__(self, client: Any, bucket: str, endpoint_url: str | None, region: str, *, direct: bool = False, timeout_s: float = 30.0) -> None:
        self.client = client
        self.bucket = bucket
        self._urls = SignedUrls(client, bucket, endpoint_url or f"https://s3.{region}.amazonaws.com", region)
        # the direct ranged read (module doc, "Segment bytes"; ``direct``: the endpoint is the client's own, as
        # ``connect`` makes it): http:// endpoints, with the SDK's compiled receive
        native = record_batch._native is not None
        self._direct = DirectS3.of(client, bucket, timeout_s, self._urls.endpoint, region) if direct and native else None
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
                _check_content_range(key, byte_range, response.get("ContentRange") or "", response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
                                     response["Body"].close)
            return response["Body"].read()  # type: ignore[no-any-return]
        except ClientError as err:
            raise _answer(self.bucket, key, err) from err
        except BotoCoreError as err:
            raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 is unavailable: {err}") from err

    def get_range(self, key: str, byte_range: ByteRange) -> bytes | memoryview:
        """The bytes of one planned range, one counted GET (module doc, "Segment bytes"): a read-only
        memoryview of pooled memory on an ``http://`` endpoint, else bytes."""
        if self._direct is None:
            return self.get(key, byte_range.http_range)
        self.gets += 1
        self.gets_by_kind[key.rsplit(".", 1)[-1]] += 1
        try:
            data, content_range = self._direct.get_range(key, byte_range.start, byte_range.end)
        except ClientError as err:
            raise _answer(self.bucket, key, err) from err
        except httpx.HTTPError as err:
            raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 is unavailable (error id {hidden_failure('s3', f'GET {key}: {err}')})") from err
        _check_content_range(key, byte_range.http_range, content_range, 206, lambda: None)
        return data

    def presign(self, key: str, byte_range: ByteRange, ttl_s: int) -> str:
        """A SigV4 URL for one object and one byte range (Range is a signed header)."""
        self.presigns += 1
        return self._urls.url(key, ttl_s, headers={"Range": byte_range.http_range})

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


def _check_content_range(key: str, byte_range: str, got: str, status: Any, close: Any) -> None:
    """A ranged GET must be answered 206 with the asked range (``Content-Range: bytes a-b/size``): module docstring."""
    asked = byte_range.removeprefix("bytes=")
    if not got.startswith(f"bytes {asked}/"):
        close()
        raise GatewayError(
            ErrorCode.CORRUPT_REMOTE_DATA,
            f"S3 answered the ranged GET of {key} ({byte_range}) with HTTP {status} and Content-Range {got or 'absent'}: the range was not honoured",
        )


def _answer(bucket: str, key: str, err: ClientError) -> GatewayError:
    """S3's refusal as the gateway's answer (module docstring): missing, or unavailable."""
    if str(err.response.get("Error", {}).get("Code", "")) in ("NoSuchKey", "404"):
        return GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"s3://{bucket}/{key} is missing")
    return GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 read of {key} failed: {err}")


