"""``rsm_urls``: the signed byte-range URLs of encrypted KIP-405 segments (issue 18)."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from tiered_kafka_gateway import rsm_urls
from tiered_kafka_gateway.errors import ErrorCode, GatewayError


def test_signed_urls_bind_cluster_object_range_and_time() -> None:
    secret = b"k" * 32
    url = rsm_urls.signed_url("http://gw:8080/", secret, "c1", "p/t-x/0/0.log", 10, 20, 60)
    parts = urlsplit(url)
    assert parts.path == "/rsm-ranges/v1/c1/p/t-x/0/0.log"
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    args = (int(q["start"]), int(q["end"]), int(q["expires"]), q["signature"])
    rsm_urls.verify(secret, "c1", unquote("p/t-x/0/0.log"), *args)
    for cluster, key, start, end, expires, secret_used in (
        ("c2", "p/t-x/0/0.log", 10, 20, args[2], secret),
        ("c1", "p/t-x/0/1.log", 10, 20, args[2], secret),
        ("c1", "p/t-x/0/0.log", 10, 21, args[2], secret),
        ("c1", "p/t-x/0/0.log", 10, 20, args[2] + 1, secret),
        ("c1", "p/t-x/0/0.log", 10, 20, args[2], b"j" * 32),
    ):
        with pytest.raises(GatewayError) as refused:
            rsm_urls.verify(secret_used, cluster, key, start, end, expires, args[3])
        assert refused.value.error is ErrorCode.RSM_URL_REFUSED
    for wrong in ("é" * 43, "\udcff", "", args[3] + "x"):  # not ASCII, a lone surrogate, empty, longer: refused, never a TypeError
        with pytest.raises(GatewayError) as refused:
            rsm_urls.verify(secret, "c1", "p/t-x/0/0.log", *args[:3], wrong)
        assert refused.value.error is ErrorCode.RSM_URL_REFUSED
    expired = int(time.time()) - 1
    signature = rsm_urls._signature(secret, "c1", "k", 0, 1, expired)
    with pytest.raises(GatewayError, match="expired"):
        rsm_urls.verify(secret, "c1", "k", 0, 1, expired, signature)
