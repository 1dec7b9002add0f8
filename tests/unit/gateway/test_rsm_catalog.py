"""``rsm_catalog.resolve_lineage``: which listed KIP-405 segments serve which offsets (issue 18)."""

from __future__ import annotations

from tiered_kafka.rsm.keys import RsmSegmentKey
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
