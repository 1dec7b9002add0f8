"""The gateway client's retry rule: what is sent again, how long to wait between attempts, how often.

Every gateway call is an idempotent GET, so one that may have failed in transit is sent again:
``retries`` retries, i.e. ``retries`` + 1 attempts in all (``call_with_retries``), after
exponential backoff with jitter (``backoff_s`` doubling per attempt, each sleep drawn in [half,
all] of it, at most ``MAX_BACKOFF_S``); then the last error is raised (``RemoteReadError``).

Transient (``transient_error``, ``transient_answer``): a connection refused or reset, a read or
connect timeout, a connection closed before the answer (``httpx.NetworkError``,
``TimeoutException``, ``RemoteProtocolError``: a replica killed mid-request behind a load
balancer), and the answers 429, 502, 503 and 504 (from the gateway, or from a load balancer with
no live replica) unless their code is one trying again cannot fix: 502 ``corrupt_remote_data``
(bytes in S3 that are not Kafka's), ``rsm_decryption_failed`` (a KIP-405 chunk or key that does not
decrypt). A 500 (``internal_error``: a bug), every 4xx answer of the gateway and a request that
cannot be sent at all (e.g. an unsupported URL scheme) are raised at once.

Presigned S3 GETs follow S3's rule instead (``GatewayClient.fetch`` raises ``TransientFailure``
for it): any 5xx, 429, or a short body is retried, with the same attempts and backoff.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

import httpx

from tiered_kafka.errors import RemoteReadError

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_BACKOFF_S = 5.0
"""The longest sleep between two attempts."""

#: answers a later attempt may get right: rate limited, or no (live) server behind a proxy
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
#: codes of the gateway's error envelope that trying again cannot fix, whatever their status
_NOT_TRANSIENT = frozenset({"internal_error", "corrupt_remote_data", "rsm_decryption_failed"})  # the last: a KIP-405 chunk or key that does not decrypt


class TransientFailure(Exception):
    """Raised by an attempt of ``call_with_retries`` for a failure worth trying again."""


def transient_answer(status: int, code: str | None) -> bool:
    """Whether a gateway answer with ``status`` and envelope ``code`` (None: not the gateway's
    envelope, e.g. a load balancer's page) is worth asking again (module docstring).

    >>> transient_answer(503, "registry_unavailable"), transient_answer(502, None), transient_answer(502, "corrupt_remote_data")
    (True, True, False)
    >>> transient_answer(500, "internal_error"), transient_answer(404, None)
    (False, False)
    """
    return status in TRANSIENT_STATUSES and code not in _NOT_TRANSIENT


def transient_error(err: httpx.TransportError) -> bool:
    """Whether a request that failed in transit may be sent again: the connection was refused,
    reset or closed before an answer, or timed out (not e.g. an unsupported URL scheme)."""
    return isinstance(err, (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError))


def backoff_s(attempt: int, base_s: float, draw: Callable[[], float] = random.random) -> float:
    """The sleep after failed attempt ``attempt`` (0 for the first): ``base_s * 2**attempt`` capped
    at ``MAX_BACKOFF_S``, times a jitter factor in [0.5, 1] (``draw`` in [0, 1)) so that clients
    failed by the same event do not come back in step.

    >>> backoff_s(0, 0.1, draw=lambda: 0.0), backoff_s(2, 0.1, draw=lambda: 0.0), backoff_s(10, 0.1, draw=lambda: 0.999999) <= MAX_BACKOFF_S
    (0.05, 0.2, True)
    """
    return min(base_s * 2 ** min(attempt, 30), MAX_BACKOFF_S) * (0.5 + draw() / 2)


def _sleep(seconds: float) -> None:
    """The backoff's sleep (a module-level name, so a test replaces it here, not in ``time``)."""
    time.sleep(seconds)


def call_with_retries(attempt: Callable[[], T], what: str, *, retries: int, base_backoff_s: float) -> T:
    """``attempt()``'s result, calling it up to ``retries`` + 1 times while it fails transiently
    (``TransientFailure``, or an ``httpx.TransportError`` that ``transient_error`` accepts),
    sleeping ``backoff_s`` between attempts. A transport error that is not transient, or the last
    attempt's failure, is raised as ``RemoteReadError`` naming ``what``; any other exception
    propagates at once."""
    for number in range(retries + 1):
        try:
            return attempt()
        except (TransientFailure, httpx.TransportError) as err:
            if not isinstance(err, TransientFailure) and not transient_error(err):
                raise RemoteReadError(f"{what} failed: {err}") from err
            if number == retries:
                raise RemoteReadError(f"{what} failed after {retries + 1} attempts: {err}") from err
            log.debug("retrying %s after %s", what, err)
        _sleep(backoff_s(number, base_backoff_s))
    raise AssertionError("unreachable")
