"""Plan sizes (#15): sized by the prefetch budget (a reader's share, in fetched bytes, split among
the ranges it keeps in flight), capped by the gateway's default max_bytes_limit, and by
``tiered.plan.max.bytes`` when it is given."""

from __future__ import annotations

import pytest

from tiered_kafka.consumer.prefetch import (
    GATEWAY_MAX_BYTES_LIMIT,
    IN_FLIGHT_FACTOR,
    IN_FLIGHT_RANGES,
    MIN_PLAN_BYTES,
    THREAD_OVERHEAD,
    ByteBudget,
    data_budget,
    default_plan_bytes,
    plan_bytes,
)
from tiered_kafka.errors import ConfigError

MIB = 2**20
BASE = {"tiered.mode": "REMOTE_ONLY", "tiered.gateway.url": "http://gateway:8080", "tiered.cluster": "c"}


def test_one_reader_splits_the_data_budget_among_the_fetch_threads() -> None:
    # 128 MiB, 4 fetch threads: 96 MiB of data, for IN_FLIGHT_RANGES (2) ranges reserved IN_FLIGHT_FACTOR times over
    assert default_plan_bytes(BASE) == (128 * MIB - 4 * THREAD_OVERHEAD) // (IN_FLIGHT_RANGES * IN_FLIGHT_FACTOR) == 16 * MIB
    assert default_plan_bytes({**BASE, "tiered.prefetch.max.bytes": 256 * MIB}) == (256 * MIB - 4 * THREAD_OVERHEAD) // 6
    # one fetch thread: still two ranges (one taken while the next is fetched)
    one = {**BASE, "tiered.prefetch.parallelism": 1, "tiered.prefetch.max.bytes": 64 * MIB}
    assert default_plan_bytes(one) == (64 * MIB - THREAD_OVERHEAD) // (2 * IN_FLIGHT_FACTOR)


def test_the_gateway_limit_and_the_explicit_override_cap_it() -> None:
    assert default_plan_bytes({**BASE, "tiered.prefetch.max.bytes": 4096 * MIB}) == GATEWAY_MAX_BYTES_LIMIT
    assert default_plan_bytes({**BASE, "tiered.plan.max.bytes": 2 * MIB}) == 2 * MIB
    # an override above the budget's split does not let a plan outgrow it
    assert default_plan_bytes({**BASE, "tiered.plan.max.bytes": 256 * MIB}) == default_plan_bytes(BASE)
    with pytest.raises(ConfigError, match="tiered.plan.max.bytes"):
        default_plan_bytes({**BASE, "tiered.plan.max.bytes": 10})


def test_plans_shrink_with_the_readers_and_the_learnt_expansion() -> None:
    budget = ByteBudget(data_budget(64 * MIB, 4), 4)
    budget.readers = 1
    assert plan_bytes(budget, None) == budget.limit // 6
    budget.readers = 2  # two fetch threads each
    assert plan_bytes(budget, None) == budget.limit // 2 // 6
    budget.readers = 8  # two ranges each, of an eighth of the budget
    assert plan_bytes(budget, None) == budget.limit // 8 // 6
    budget.factor = 6  # records decoded to twice the fetched bytes, or more
    assert plan_bytes(budget, None) == budget.limit // 8 // 12
    budget.readers = 100_000
    assert plan_bytes(budget, None) == MIN_PLAN_BYTES
