"""Retrying what can heal: one policy, full jitter, and the one list of transient errors.

Used by the agent (S3 writes and reads, registry calls), the SDK's gateway client (gateway API
calls and presigned GETs) and the registry client (which Redis errors are ``RegistryUnavailableError``).

The policy (``RetryPolicy``): ``attempts`` tries in all; after the n-th consecutive failure
(n = 1, 2, ...) the caller sleeps ``uniform(0, min(cap_s, base_s * 2**(n-1)))`` -- AWS's "full
jitter" (https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/), which spreads
the retries of many clients failed by one event (agents hitting one S3 prefix, consumers behind a
load balancer that lost its replicas). ``base_s`` is thus the longest first sleep; each later one
may be twice as long, up to ``cap_s``. Then the last error is raised.

What is transient (``is_transient``), i.e. what a later attempt may overcome:
  * our own exceptions say so themselves: ``TieredKafkaError.retriable`` (``RegistryUnavailableError``,
    a ``GatewayRequestError`` for 429/502/503/504 unless its code is one trying again cannot fix,
    ``TransientReadError``; tiered_kafka.errors draws the tree);
  * Python's ``ConnectionError`` (refused, reset, aborted, broken pipe) and ``TimeoutError``;
  * httpx: a connection refused, reset or closed before the answer, a timeout (``NetworkError``,
    ``TimeoutException``, ``RemoteProtocolError``), not e.g. an unsupported URL scheme;
  * redis-py: ``ConnectionError`` (``BusyLoadingError`` included: a replica loading its data),
    ``TimeoutError``, ``ClusterError`` (cluster down, slot map moving), ``TryAgainError`` (a
    multi-key command during resharding), ``ReadOnlyError`` (a replica promoted under us);
  * boto3/botocore: connection and HTTP client errors, an answer 5xx or one of S3's throttling and
    timeout codes (``RETRIABLE_S3_CODES``); ``S3UploadFailedError`` is judged by the error it wraps.
Anything else (a 4xx, corrupt bytes, a bug) is raised at once.

The SDK does not depend on redis-py, botocore or boto3: their classes are looked up in
``sys.modules`` only (an error of a library that was never imported cannot be at hand).
"""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tiered_kafka.errors import TieredKafkaError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: S3 error codes a later attempt may get past (throttling, timeouts, S3's own failures)
RETRIABLE_S3_CODES = frozenset(
    {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling", "ThrottlingException", "RequestTimeTooSkewed", "503", "500"}
)
_MAX_EXPONENT = 60  # 2**60 times any base is past every cap: no float overflow for any failure count


def _loaded(module: str) -> Any:
    """``module`` if something already imported it, else None (module doc: no optional imports here)."""
    return sys.modules.get(module)


def _transient_httpx(err: BaseException) -> bool:
    httpx = _loaded("httpx")
    return httpx is not None and isinstance(err, (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError))


def _transient_redis(err: BaseException) -> bool:
    rx = _loaded("redis.exceptions")
    return rx is not None and isinstance(err, (rx.ConnectionError, rx.TimeoutError, rx.ClusterError, rx.TryAgainError, rx.ReadOnlyError))


def _transient_boto(err: BaseException) -> bool:
    boto_errors, botocore = _loaded("boto3.exceptions"), _loaded("botocore.exceptions")
    if boto_errors is not None and isinstance(err, boto_errors.S3UploadFailedError):
        # boto3's transfer manager raises this while handling the real error: judge that one
        cause = err.__cause__ or err.__context__
        return True if cause is None else is_transient(cause)
    if botocore is None:
        return False
    if isinstance(err, botocore.ClientError):
        code = str(err.response.get("Error", {}).get("Code", ""))
        status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return code in RETRIABLE_S3_CODES or status >= 500
    return isinstance(err, (botocore.ConnectionError, botocore.HTTPClientError))


def is_transient(err: BaseException) -> bool:
    """True for failures that a later attempt can overcome (the list in the module docstring)."""
    if isinstance(err, TieredKafkaError):
        return err.retriable
    if isinstance(err, (ConnectionError, TimeoutError)):
        return True
    return _transient_httpx(err) or _transient_redis(err) or _transient_boto(err)


def _sleep(seconds: float) -> None:
    """The backoff's sleep (a module-level name, so a unit test replaces it here, not in ``time``)."""
    time.sleep(seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all (1: no retry), full-jitter backoff from ``base_s`` capped at ``cap_s``.

    >>> RetryPolicy(attempts=4, base_s=0.1, cap_s=0.3).delay(1, draw=lambda: 0.5)
    0.05
    >>> [RetryPolicy(attempts=4, base_s=0.1, cap_s=0.3).delay(n, draw=lambda: 1.0) for n in (1, 2, 3, 10_000)]
    [0.1, 0.2, 0.3, 0.3]
    """

    attempts: int = 8
    base_s: float = 0.2
    cap_s: float = 30.0
    log_level: int = logging.WARNING  # of the line logged per retry (the SDK's clients: DEBUG)

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base_s < 0 or self.cap_s < 0:
            raise ValueError(f"a retry policy needs attempts >= 1 and non-negative base and cap, got {self}")

    def delay(self, failures: int, draw: Callable[[], float] = random.random) -> float:
        """The sleep after ``failures`` consecutive failures (1 for the first): ``draw()`` (in [0, 1))
        times ``min(cap_s, base_s * 2**(failures - 1))``."""
        exponent = min(max(failures - 1, 0), _MAX_EXPONENT)
        return draw() * min(self.cap_s, self.base_s * 2**exponent)

    def call(
        self,
        action: Callable[[], T],
        *,
        what: str,
        on_retry: Callable[[BaseException], None] | None = None,
        pause: Callable[[float], None] | None = None,
    ) -> T:
        """Run ``action``; while it raises a transient error (``is_transient``) and attempts remain,
        sleep ``delay`` and run it again; re-raise the last error, or at once one that is not transient.

        ``on_retry`` sees each error that is retried (the agent counts them); ``pause`` sleeps between
        attempts (default ``time.sleep``; the agent's uploader gives its upload slot back meanwhile)."""
        failures = 0
        while True:
            try:
                return action()
            except Exception as err:
                failures += 1
                if failures >= self.attempts or not is_transient(err):
                    raise
                delay = self.delay(failures)
                log.log(self.log_level, "%s failed (attempt %d of %d), retrying in %.2fs: %s", what, failures, self.attempts, delay, err)
                if on_retry is not None:
                    on_retry(err)
                (pause or _sleep)(delay)
