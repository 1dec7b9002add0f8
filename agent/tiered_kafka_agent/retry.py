"""Retrying transient failures: capped exponential backoff with full jitter.

delay(attempt) = uniform(0, min(max_s, base_s * 2**attempt)) — AWS's "full jitter", which
spreads retries of many agents hitting one S3 prefix. Only errors that can heal are retried:
connection failures, timeouts, HTTP 5xx, S3's SlowDown/throttling, and Redis connection errors.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import botocore.exceptions
from boto3.exceptions import S3UploadFailedError

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRIABLE_S3_CODES = frozenset(
    {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling", "ThrottlingException", "RequestTimeTooSkewed", "503", "500"}
)


def is_retriable(err: BaseException) -> bool:
    """True for failures that a later attempt can overcome."""
    if isinstance(err, S3UploadFailedError):
        # boto3's transfer manager raises this while handling the real error: judge that one
        cause = err.__cause__ or err.__context__
        return True if cause is None else is_retriable(cause)
    if isinstance(err, botocore.exceptions.ClientError):
        code = str(err.response.get("Error", {}).get("Code", ""))
        status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return code in RETRIABLE_S3_CODES or status >= 500
    if isinstance(err, (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError)):
        return True
    if isinstance(err, (ConnectionError, TimeoutError)):
        return True
    try:
        import redis.exceptions

        if isinstance(err, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.BusyLoadingError)):
            return True
    except ImportError:  # pragma: no cover - redis is an agent dependency
        pass
    return False


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8
    base_s: float = 0.2
    max_s: float = 30.0

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.max_s, self.base_s * 2**attempt))

    def call(
        self,
        action: Callable[[], T],
        *,
        what: str,
        on_retry: Callable[[BaseException], None] = lambda err: None,
        pause: Callable[[float], None] = time.sleep,
    ) -> T:
        """Run ``action``; retry retriable errors up to max_attempts; re-raise the last error.

        ``pause`` sleeps between attempts (the uploader's gives its upload slot back meanwhile)."""
        attempt = 0
        while True:
            try:
                return action()
            except Exception as err:
                attempt += 1
                if not is_retriable(err) or attempt >= self.max_attempts:
                    raise
                delay = self.delay(attempt)
                log.warning("%s failed (attempt %d of %d), retrying in %.2fs: %s", what, attempt, self.max_attempts, delay, err)
                on_retry(err)
                pause(delay)
