"""Pure logic of the gateway's KIP-405 side: lineage resolution of listed segments, the signed
byte-range URLs, and the kip405 cluster settings (issue 18)."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from tiered_kafka.errors import ConfigError
from tiered_kafka.rsm.keys import RsmSegmentKey
from tiered_kafka_gateway import rsm_urls
from tiered_kafka_gateway.config import load_settings
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.rsm_catalog import RsmSegment, resolve_lineage

TOPIC_ID = "MWJ6FHTfRYy67jzwZdeqSQ"
IDS = ["tqimKeZwStOEOwRzT3L5oQ", "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBA", "CCCCCCCCCCCCCCCCCCCCCA"]


def segment(i: int, base: int, last: int, epoch: int, epochs: tuple[tuple[int, int], ...] | None = None) -> RsmSegment:
    return RsmSegment(RsmSegmentKey("p/", "t", TOPIC_ID, 0, base, IDS[i]), base, last, -1, 100, epochs or ((epoch, base),))


def served(kept: list[RsmSegment]) -> list[tuple[str, int, int]]:
    return [(s.key.segment_id, s.first, s.last) for s in kept]


def test_the_later_leader_epoch_wins_an_overlap() -> None:
    old_lineage = segment(0, 100, 199, 1)  # the old leader's copy of 100..199, diverged after an unclean election
    new_lineage = segment(1, 150, 249, 2)
    before = segment(2, 0, 99, 1)
    covered = segment(3, 160, 240, 1)  # wholly inside the new lineage's copy: dropped
    kept = resolve_lineage([new_lineage, old_lineage, before, covered])
    # the old copy serves only what the new lineage does not hold
    assert served(kept) == [(IDS[2], 0, 99), (IDS[0], 100, 149), (IDS[1], 150, 249)]
    assert kept[1].base_offset == 100 and kept[1].last_offset == 199 and kept[1].serve_last == 149


def test_segments_of_one_lineage_overlapping_in_part_are_clipped_not_dropped() -> None:
    # Leadership moved between replicas whose segments roll at other offsets: A=[0..99] {0:0} and
    # B=[80..180] {0:80, 1:150}. B ranks first (epoch 1); A serves 0..79 instead of disappearing.
    a = segment(0, 0, 99, 0)
    b = segment(1, 80, 180, 1, ((0, 80), (1, 150)))
    kept = resolve_lineage([a, b])
    assert served(kept) == [(IDS[0], 0, 79), (IDS[1], 80, 180)]
    # a later-lineage segment inside an older one: the older serves both sides, as two entries
    kept = resolve_lineage([segment(0, 0, 299, 1), segment(1, 100, 199, 2)])
    assert served(kept) == [(IDS[0], 0, 99), (IDS[1], 100, 199), (IDS[0], 200, 299)]
    assert kept[2].first_offset == 200 and kept[2].serve_last is None


def test_an_open_ended_segment_overlaps_one_starting_at_its_base() -> None:
    kept = resolve_lineage([segment(0, 0, -1, 1), segment(1, 0, 99, 1), segment(3, 100, -1, 1)])
    assert served(kept) == [(IDS[1], 0, 99), (IDS[3], 100, -1)]


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


def test_kip405_settings_are_checked_without_quoting_keys(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("TIERED_KAFKA_GATEWAY_CONFIG", raising=False)
    pem = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n"
    cluster = {"kind": "kip405", "rsm": {"bucket": "b", "key_ring": {"k1": pem}}}
    with pytest.raises(ConfigError, match="rsm_url_secret") as missing_secret:
        load_settings(clusters={"c": cluster})
    assert "c2VjcmV0" not in str(missing_secret.value)
    with pytest.raises(ConfigError, match="public_url"):
        load_settings(clusters={"c": cluster}, rsm_url_secret="s" * 32)
    (tmp_path / "k.pem").write_text(pem)
    settings = load_settings(clusters={"c": {"kind": "kip405", "rsm": {"bucket": "b", "key_ring": {"k1": str(tmp_path / "k.pem")}}}},
                             rsm_url_secret="s" * 32, public_url="http://gw")
    assert settings.clusters["c"].rsm.key_ring["k1"].get_secret_value() == pem  # type: ignore[union-attr]
    assert "c2VjcmV0" not in repr(settings)
    with pytest.raises(ConfigError, match="not PEM text, and not a readable file"):
        load_settings(clusters={"c": {"kind": "kip405", "rsm": {"bucket": "b", "key_ring": {"k1": str(tmp_path / "none.pem")}}}})
    with pytest.raises(ConfigError, match='kind "kip405" has no registry'):
        load_settings(clusters={"c": {**cluster, "redis_url": "redis://r", "rsm": {"bucket": "b"}}})
    with pytest.raises(ConfigError, match='kind "agent" needs redis_url and s3'):
        load_settings(clusters={"c": {"s3": {"bucket": "b"}}})
