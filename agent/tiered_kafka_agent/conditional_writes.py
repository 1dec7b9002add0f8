"""Conditional writes on S3: what two leaders of one partition rely on (``remote_store``, ``two_leaders``).

- ``If-None-Match: *`` on a ``.log``'s PutObject or CompleteMultipartUpload creates the object
  only if the key is free (412 PreconditionFailed otherwise; 409 ConditionalRequestConflict while
  another conditional write of the key is in progress). boto3's transfer manager does not pass the
  parameter on, so a botocore ``before-parameter-build`` hook adds it for the keys being written
  (:func:`exclusive_key`); the hook is registered once per client (``unique_id``), however many
  stores share the client.
- :func:`check_conditional_writes`: the agent's startup probe. A store that ignores the header
  would let a leader overwrite another's segment, so it is refused (:class:`ConditionalWritesUnsupportedError`).
- Errors are recognised by their S3 code (:func:`s3_error_code`), through boto3's
  ``S3UploadFailedError`` wrapper.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

from botocore.exceptions import ClientError

from tiered_kafka.errors import ConfigError
from tiered_kafka.retry import RetryPolicy


def s3_error_code(err: BaseException | None) -> str | None:
    """The S3 error code of ``err`` or of the ClientError it wraps (boto3's S3UploadFailedError
    is raised while handling the real one); ``"412"`` for a 412 without a code; None for others."""
    seen = 0
    while err is not None and seen < 5:
        if isinstance(err, ClientError):
            code = str(err.response.get("Error", {}).get("Code", ""))
            status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            return "PreconditionFailed" if code == "412" or (status == 412 and not code) else code
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


# .log keys being written with If-None-Match: * as (bucket, key) (module doc)
_exclusive_keys: set[tuple[str, str]] = set()
_exclusive_lock = threading.Lock()


def _add_if_none_match(params: dict[str, Any], **_: Any) -> None:
    with _exclusive_lock:
        exclusive = (params.get("Bucket"), params.get("Key")) in _exclusive_keys
    if exclusive:
        params["IfNoneMatch"] = "*"


class ConditionalWritesUnsupportedError(ConfigError):
    """The S3 store accepted a second ``If-None-Match: *`` PUT of one key: two leaders could overwrite each other's segments."""


def exclusive_key(bucket: str, key: str, on: bool) -> None:
    """Start (``on``) or stop adding ``If-None-Match: *`` to writes of ``key`` (module doc)."""
    with _exclusive_lock:
        if on:
            _exclusive_keys.add((bucket, key))
        else:
            _exclusive_keys.discard((bucket, key))


def add_if_none_match_hook(client: Any) -> None:
    """Register the hook on ``client``'s events, once (module doc)."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None:
        for operation in ("PutObject", "CompleteMultipartUpload"):
            events.register(f"before-parameter-build.s3.{operation}", _add_if_none_match, unique_id=f"tiered-kafka-if-none-match-{operation}")


def check_conditional_writes(client: Any, bucket: str, where: str, retry: RetryPolicy) -> None:
    """Refuse a store that ignores ``If-None-Match: *``: two conditional PUTs of a probe key under
    ``where`` (a prefix of the agent's cluster), the second must be answered 412; the probe is
    deleted after. Raises :class:`ConditionalWritesUnsupportedError` naming the store."""
    key = f"{where}conditional-write-probe-{uuid.uuid4().hex}"
    put = lambda: client.put_object(Bucket=bucket, Key=key, Body=b"probe", IfNoneMatch="*")  # noqa: E731
    try:
        retry.call(put, what=f"conditional write probe s3://{bucket}/{key}")
        try:
            retry.call(put, what=f"conditional write probe s3://{bucket}/{key}")
        except ClientError as err:
            if s3_error_code(err) == "PreconditionFailed":
                return
            raise
        endpoint = getattr(getattr(client, "meta", None), "endpoint_url", "?")
        raise ConditionalWritesUnsupportedError(
            f"the S3 store at {endpoint} (bucket {bucket}) accepted a second PutObject with If-None-Match: * of {key}: "
            "it ignores conditional writes, so two leaders of one partition could overwrite each other's segments; "
            "use a store that honours If-None-Match (AWS S3, SeaweedFS, MinIO)"
        )
    finally:
        with contextlib.suppress(ClientError):
            client.delete_object(Bucket=bucket, Key=key)
