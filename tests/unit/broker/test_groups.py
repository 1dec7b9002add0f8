"""The development broker's consumer-group coordinator and offset store, against Kafka's classic group protocol.

Time is a fake clock: the tests move it and call ``check_deadlines()`` themselves, so nothing depends on
real timing (except the one test of the background task, which only checks that it eventually happens).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from tiered_kafka_dev.broker.groups import (
    GroupCoordinator,
    GroupListing,
    GroupMember,
    JoinResult,
    SyncResult,
)
from tiered_kafka_dev.broker.offset_store import CommittedOffset, CorruptOffsetsFileError, OffsetStore

P = ParamSpec("P")
R = TypeVar("R")

GROUP = "g"
PROTOCOLS = [("range", b"range-meta"), ("roundrobin", b"rr-meta")]
INITIAL_DELAY_MS = 3_000
REBALANCE_MS = 3_000
SESSION_MS = 10_000


def async_test(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, R]:
    """Run an async test on a fresh event loop (pytest-asyncio is not used)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms / 1000


class Harness:
    """A coordinator on a fake clock, with helpers speaking for clients."""

    def __init__(self, store: OffsetStore | None = None, **options: Any) -> None:
        self.clock = FakeClock()
        options.setdefault("initial_rebalance_delay_ms", INITIAL_DELAY_MS)
        options.setdefault("min_session_timeout_ms", 1_000)
        self.store = store if store is not None else OffsetStore(None)
        self.coordinator = GroupCoordinator(self.store, clock=self.clock, **options)

    def tick(self, ms: int) -> None:
        self.clock.advance(ms)
        self.coordinator.check_deadlines()

    async def join(
        self,
        member_id: str = "",
        *,
        client_id: str = "client",
        group_id: str = GROUP,
        instance_id: str | None = None,
        protocols: list[tuple[str, bytes]] = PROTOCOLS,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        require_known_member_id: bool = True,
    ) -> JoinResult:
        return await self.coordinator.join_group(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=instance_id,
            client_id=client_id,
            client_host="/127.0.0.1",
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            require_known_member_id=require_known_member_id,
        )

    async def new_member_id(self, client_id: str = "client", **kwargs: Any) -> str:
        """The MEMBER_ID_REQUIRED round trip's first half: the id the coordinator hands out."""
        result = await self.join(client_id=client_id, **kwargs)
        assert result.error_code == ErrorCode.member_id_required
        assert result.member_id.startswith(f"{client_id}-")
        assert result.generation_id == -1
        return result.member_id

    def start_join(self, member_id: str, **kwargs: Any) -> asyncio.Task[JoinResult]:
        return asyncio.create_task(self.join(member_id, **kwargs))

    async def sync(
        self, joined: JoinResult, assignments: dict[str, bytes] | None = None, *, generation_id: int | None = None
    ) -> SyncResult:
        return await self.coordinator.sync_group(
            group_id=GROUP,
            generation_id=joined.generation_id if generation_id is None else generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name=joined.protocol_name,
            assignments=assignments or {},
        )

    def heartbeat(self, member_id: str, generation_id: int, group_id: str = GROUP) -> ErrorCode:
        return self.coordinator.heartbeat(
            group_id=group_id, generation_id=generation_id, member_id=member_id, group_instance_id=None
        )

    def commit(
        self, member_id: str, generation_id: int, offsets: dict[tuple[str, int], int], group_id: str = GROUP
    ) -> dict[tuple[str, int], ErrorCode]:
        return self.coordinator.commit_offsets(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=None,
            offsets={tp: CommittedOffset(offset, 7, f"m{offset}", 1234) for tp, offset in offsets.items()},
        )

    def state(self, group_id: str = GROUP) -> str:
        return self.coordinator.describe_group(group_id).state

    async def drive(self, tasks: list[asyncio.Task[JoinResult]], step_ms: int = INITIAL_DELAY_MS) -> list[JoinResult]:
        """Let time pass in steps until every join completes (bounded, so a bug fails instead of hanging)."""
        for _ in range(20):
            await settle()
            if all(task.done() for task in tasks):
                return [task.result() for task in tasks]
            self.tick(step_ms)
        raise AssertionError("joins did not complete")

    async def form_group(self, clients: list[str], **join_kwargs: Any) -> list[JoinResult]:
        """Members join with the MEMBER_ID_REQUIRED round trip and complete the first rebalance together."""
        ids = [await self.new_member_id(client, **join_kwargs) for client in clients]
        joins = [self.start_join(member_id, client_id=client, **join_kwargs) for member_id, client in zip(ids, clients)]
        return await self.drive(joins)

    async def stable_group(self, clients: list[str], **join_kwargs: Any) -> list[JoinResult]:
        """A formed group whose members all synced; member i is assigned ``f"a{i}"``."""
        joined = await self.form_group(clients, **join_kwargs)
        await self.sync_all(joined)
        assert self.state() == "Stable"
        return joined

    async def sync_all(self, joined: list[JoinResult]) -> list[SyncResult]:
        leader = next(result for result in joined if result.members)
        followers = [asyncio.create_task(self.sync(result)) for result in joined if result is not leader]
        await settle()
        assignments = {result.member_id: f"a{index}".encode() for index, result in enumerate(joined)}
        leader_sync = await self.sync(leader, assignments)
        return [leader_sync, *await asyncio.gather(*followers)]


async def settle() -> None:
    """Let every ready task run until it blocks."""
    for _ in range(10):
        await asyncio.sleep(0)


# ---------------------------------------------------------------------------------------------- JoinGroup


@async_test
async def test_two_members_join_with_member_id_required_round_trip() -> None:
    h = Harness()
    first = await h.new_member_id("alpha")
    second = await h.new_member_id("beta")
    assert first != second
    tasks = [h.start_join(first), h.start_join(second)]
    await settle()
    assert h.state() == "PreparingRebalance"
    assert not any(task.done() for task in tasks)  # group.initial.rebalance.delay.ms not yet over

    leader, follower = await h.drive(tasks)

    for result in (leader, follower):
        assert result.error_code == ErrorCode.none
        assert result.generation_id == 1
        assert result.protocol_type == "consumer"
        assert result.protocol_name == "range"
        assert result.leader_id == first  # the first member to join leads
    assert [leader.member_id, follower.member_id] == [first, second]
    assert leader.members == [GroupMember(first, None, b"range-meta"), GroupMember(second, None, b"range-meta")]
    assert follower.members == []
    assert h.state() == "CompletingRebalance"


@async_test
async def test_three_members_vote_for_the_protocol() -> None:
    h = Harness()
    prefer_rr = [("roundrobin", b"rr-meta"), ("range", b"range-meta"), ("sticky", b"s")]
    prefer_range = [("range", b"range-meta"), ("roundrobin", b"rr-meta")]
    joined = await h.form_group(["a", "b", "c"], protocols=prefer_rr)
    assert {result.protocol_name for result in joined} == {"roundrobin"}

    h2 = Harness()
    ids = [await h2.new_member_id(client) for client in ("a", "b", "c")]
    tasks = [
        h2.start_join(ids[0], protocols=prefer_rr),
        h2.start_join(ids[1], protocols=prefer_range),
        h2.start_join(ids[2], protocols=prefer_range),
    ]
    joined = await h2.drive(tasks)
    # "sticky" is not supported by everyone; among the rest, two members vote "range" and one "roundrobin".
    assert {result.protocol_name for result in joined} == {"range"}
    assert joined[0].leader_id == ids[0]
    assert [m.metadata for m in joined[0].members] == [b"range-meta"] * 3


@async_test
async def test_initial_delay_is_extended_while_new_members_arrive() -> None:
    h = Harness(initial_rebalance_delay_ms=1_000)
    first = await h.new_member_id("a")
    task_a = h.start_join(first, rebalance_ms=10_000)
    await settle()
    h.tick(600)
    second = await h.new_member_id("b")
    task_b = h.start_join(second, rebalance_ms=10_000)
    await settle()
    h.tick(400)  # first delay over, but a member arrived meanwhile: wait one more delay
    await settle()
    assert not task_a.done() and not task_b.done()
    h.tick(1_000)
    await settle()
    assert task_a.result().generation_id == task_b.result().generation_id == 1
    assert len(task_a.result().members) == 2


@async_test
async def test_zero_initial_delay_completes_the_first_join_without_a_tick() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    first = await asyncio.wait_for(h.join(await h.new_member_id("a"), client_id="a"), timeout=5)
    assert (first.error_code, first.generation_id, first.leader_id) == (ErrorCode.none, 1, first.member_id)


@async_test
async def test_inconsistent_protocol_and_invalid_session_timeout() -> None:
    h = Harness()
    await h.form_group(["a"])
    assert (await h.join(protocol_type="connect")).error_code == ErrorCode.inconsistent_group_protocol
    result = await h.join(protocols=[("sticky", b"s")])
    assert result.error_code == ErrorCode.inconsistent_group_protocol
    assert (await h.join(group_id="other", protocols=[])).error_code == ErrorCode.inconsistent_group_protocol
    assert (await h.join(session_ms=999)).error_code == ErrorCode.invalid_session_timeout
    assert (await h.join(session_ms=1_800_001)).error_code == ErrorCode.invalid_session_timeout
    assert (await h.join(group_id="")).error_code == ErrorCode.invalid_group_id
    assert (await h.join("someone", group_id="unknown")).error_code == ErrorCode.unknown_member_id


@async_test
async def test_join_without_member_id_requirement_and_rejoin_with_unknown_id() -> None:
    h = Harness()
    task = asyncio.create_task(h.join(require_known_member_id=False, client_id="old-client"))
    (result,) = await h.drive([task])
    assert result.error_code == ErrorCode.none
    assert result.member_id.startswith("old-client-")
    assert result.leader_id == result.member_id
    assert (await h.join("stranger")).error_code == ErrorCode.unknown_member_id


# ---------------------------------------------------------------------------------------------- SyncGroup


@async_test
async def test_sync_distributes_the_leaders_assignments() -> None:
    h = Harness()
    leader, second, third = await h.form_group(["a", "b", "c"])
    follower_sync = asyncio.create_task(h.sync(second))
    await settle()
    assert not follower_sync.done()  # followers wait for the leader
    # The leader forgets the third member: it gets an empty assignment.
    leader_sync = await h.sync(leader, {leader.member_id: b"A", second.member_id: b"B"})
    third_sync = await h.sync(third)
    assert leader_sync == SyncResult(ErrorCode.none, "consumer", "range", b"A")
    assert (await follower_sync) == SyncResult(ErrorCode.none, "consumer", "range", b"B")
    assert third_sync.error_code == ErrorCode.none and third_sync.assignment == b""
    assert h.state() == "Stable"
    # In Stable a sync just returns the current assignment.
    assert (await h.sync(second)).assignment == b"B"


@async_test
async def test_sync_errors() -> None:
    h = Harness()
    leader, follower = await h.stable_group(["a", "b"])
    assert (await h.sync(follower, generation_id=7)).error_code == ErrorCode.illegal_generation
    stranger = JoinResult(ErrorCode.none, 1, "consumer", "range", leader.member_id, "nobody")
    assert (await h.sync(stranger)).error_code == ErrorCode.unknown_member_id
    result = await h.coordinator.sync_group(
        group_id="unknown", generation_id=1, member_id=leader.member_id, group_instance_id=None,
        protocol_type=None, protocol_name=None, assignments={},
    )
    assert result.error_code == ErrorCode.unknown_member_id
    result = await h.coordinator.sync_group(
        group_id=GROUP, generation_id=1, member_id=leader.member_id, group_instance_id=None,
        protocol_type="consumer", protocol_name="roundrobin", assignments={},
    )
    assert result.error_code == ErrorCode.inconsistent_group_protocol
    # A third member starts a rebalance: syncs of the old generation get REBALANCE_IN_PROGRESS.
    h.start_join(await h.new_member_id("c"))
    await settle()
    assert (await h.sync(follower)).error_code == ErrorCode.rebalance_in_progress


@async_test
async def test_rebalance_during_completing_rebalance_answers_waiting_syncs() -> None:
    h = Harness()
    leader, follower = await h.form_group(["a", "b"])
    follower_sync = asyncio.create_task(h.sync(follower))
    await settle()
    h.start_join(await h.new_member_id("c"))
    await settle()
    assert (await follower_sync) == SyncResult(ErrorCode.rebalance_in_progress, None, None, b"")
    assert h.state() == "PreparingRebalance"


# ---------------------------------------------------------------------------------------------- rebalances


@async_test
async def test_new_member_makes_heartbeats_ask_for_rejoin_and_next_generation_has_three() -> None:
    h = Harness()
    leader, follower = await h.stable_group(["a", "b"])
    assert h.heartbeat(leader.member_id, 1) == ErrorCode.none
    assert h.heartbeat(follower.member_id, 1) == ErrorCode.none

    newcomer = h.start_join(await h.new_member_id("c"))
    await settle()
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(leader.member_id, 1) == ErrorCode.rebalance_in_progress
    assert h.heartbeat(follower.member_id, 1) == ErrorCode.rebalance_in_progress

    rejoins = [h.start_join(leader.member_id), h.start_join(follower.member_id)]
    # Every member has rejoined: the join completes without waiting for the rebalance timeout.
    results = await asyncio.wait_for(asyncio.gather(*rejoins, newcomer), timeout=5)
    assert {result.generation_id for result in results} == {2}
    assert {result.leader_id for result in results} == {leader.member_id}  # the leader keeps its role
    assert len(results[0].members) == 3
    assert results[1].members == [] and results[2].members == []
    assert h.heartbeat(leader.member_id, 1) == ErrorCode.illegal_generation
    assert h.heartbeat(leader.member_id, 2) == ErrorCode.none  # CompletingRebalance
    await h.sync_all(list(results))
    assert h.state() == "Stable"
    assert len(h.coordinator.describe_group(GROUP).members) == 3


@async_test
async def test_heartbeat_errors() -> None:
    h = Harness()
    leader, _ = await h.stable_group(["a", "b"])
    assert h.heartbeat(leader.member_id, 1, group_id="unknown") == ErrorCode.unknown_member_id
    assert h.heartbeat("nobody", 1) == ErrorCode.unknown_member_id
    assert h.heartbeat(leader.member_id, 0) == ErrorCode.illegal_generation
    assert h.heartbeat(leader.member_id, 2) == ErrorCode.illegal_generation
    assert h.heartbeat(leader.member_id, 1, group_id="") == ErrorCode.invalid_group_id


@async_test
async def test_leave_triggers_rebalance_and_last_leave_empties_the_group() -> None:
    h = Harness()
    leader, follower = await h.stable_group(["a", "b"])
    error, results = h.coordinator.leave_group(group_id=GROUP, members=[(follower.member_id, None), ("nobody", None)])
    assert error == ErrorCode.none
    assert results == [(follower.member_id, None, ErrorCode.none), ("nobody", None, ErrorCode.unknown_member_id)]
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(leader.member_id, 1) == ErrorCode.rebalance_in_progress
    assert h.heartbeat(follower.member_id, 1) == ErrorCode.unknown_member_id

    rejoined = await asyncio.wait_for(h.join(leader.member_id), timeout=5)
    assert rejoined.generation_id == 2
    assert [m.member_id for m in rejoined.members] == [leader.member_id]

    h.coordinator.leave_group(group_id=GROUP, members=[(leader.member_id, None)])
    description = h.coordinator.describe_group(GROUP)
    assert (description.state, description.members) == ("Empty", [])
    unknown_group = h.coordinator.leave_group(group_id="unknown", members=[("x", None)])
    assert unknown_group == (ErrorCode.none, [("x", None, ErrorCode.unknown_member_id)])


@async_test
async def test_leave_of_a_member_waiting_in_join() -> None:
    h = Harness()
    member_id = await h.new_member_id("a")
    waiting = h.start_join(member_id)
    await settle()
    h.coordinator.leave_group(group_id=GROUP, members=[(member_id, None)])
    result = await waiting
    assert result.error_code == ErrorCode.unknown_member_id


@async_test
async def test_session_expiry_removes_a_silent_member() -> None:
    h = Harness()
    leader, silent = await h.stable_group(["a", "b"], session_ms=1_000)
    h.tick(600)
    assert h.heartbeat(leader.member_id, 1) == ErrorCode.none
    h.tick(600)  # the silent member's session (1 s) is over, the leader's is not
    assert h.state() == "PreparingRebalance"
    assert [m.member_id for m in h.coordinator.describe_group(GROUP).members] == [leader.member_id]
    assert h.heartbeat(silent.member_id, 1) == ErrorCode.unknown_member_id
    assert h.heartbeat(leader.member_id, 1) == ErrorCode.rebalance_in_progress
    rejoined = await asyncio.wait_for(h.join(leader.member_id, session_ms=1_000), timeout=5)
    assert rejoined.generation_id == 2 and len(rejoined.members) == 1


@async_test
async def test_members_waiting_in_join_are_not_expired_by_session_timeout() -> None:
    h = Harness()
    leader, follower = await h.stable_group(["a", "b"], session_ms=1_000, rebalance_ms=5_000)
    waiting = h.start_join(leader.member_id, session_ms=1_000, rebalance_ms=5_000)
    await settle()
    for _ in range(4):
        h.tick(900)
        assert h.heartbeat(follower.member_id, 1) == ErrorCode.rebalance_in_progress
    assert not waiting.done()  # 3.6 s in the join, over the 1 s session timeout, still a member
    assert len(h.coordinator.describe_group(GROUP).members) == 2


@async_test
async def test_rebalance_timeout_drops_a_member_that_never_rejoins() -> None:
    h = Harness()
    leader, follower = await h.stable_group(["a", "b"], rebalance_ms=5_000)
    waiting = h.start_join(leader.member_id, rebalance_ms=5_000)  # the leader's join starts a rebalance
    await settle()
    h.tick(4_000)
    assert h.heartbeat(follower.member_id, 1) == ErrorCode.rebalance_in_progress  # keeps its session, never rejoins
    await settle()
    assert not waiting.done()
    h.tick(1_000)
    result = await asyncio.wait_for(waiting, timeout=5)
    assert result.generation_id == 2
    assert [m.member_id for m in result.members] == [leader.member_id]
    assert h.heartbeat(follower.member_id, 1) == ErrorCode.unknown_member_id


@async_test
async def test_pending_member_blocks_join_until_its_session_expires() -> None:
    h = Harness()
    (leader,) = await h.stable_group(["a"], session_ms=2_000)
    await h.new_member_id("late", session_ms=2_000)  # MEMBER_ID_REQUIRED, then silence
    waiting = h.start_join(leader.member_id, session_ms=2_000)
    await settle()
    assert not waiting.done()  # the pending member may still rejoin
    h.tick(2_000)
    result = await asyncio.wait_for(waiting, timeout=5)
    assert result.generation_id == 2 and len(result.members) == 1


@async_test
async def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    leader, lazy = await h.form_group(["a", "b"])
    await h.sync(leader, {leader.member_id: b"A", lazy.member_id: b"B"})
    assert h.state() == "Stable"
    h.tick(REBALANCE_MS)
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(lazy.member_id, 1) == ErrorCode.unknown_member_id


@async_test
async def test_disconnected_client_does_not_break_the_group() -> None:
    h = Harness()
    first = await h.new_member_id("a")
    second = await h.new_member_id("b")
    gone = h.start_join(first)
    alive = h.start_join(second)
    await settle()
    gone.cancel()  # the connection closed while the join was waiting
    (result,) = await h.drive([alive])
    assert result.error_code == ErrorCode.none and result.generation_id == 1
    assert result.leader_id == first  # the member is still in the group until its session expires
    assert gone.cancelled()


@async_test
async def test_static_member_rejoins_without_rebalance_and_fences_its_old_id() -> None:
    h = Harness()
    task_a = asyncio.create_task(h.join(instance_id="instance-a", client_id="a"))
    task_b = asyncio.create_task(h.join(instance_id="instance-b", client_id="b"))
    leader, follower = await h.drive([task_a, task_b])
    assert leader.member_id.startswith("instance-a-")  # static members join at once, no MEMBER_ID_REQUIRED
    await h.sync_all([leader, follower])

    restarted = await h.join(instance_id="instance-b", client_id="b")
    assert restarted.error_code == ErrorCode.none
    assert restarted.generation_id == 1 and restarted.member_id != follower.member_id
    assert h.state() == "Stable"
    fenced = h.coordinator.heartbeat(
        group_id=GROUP, generation_id=1, member_id=follower.member_id, group_instance_id="instance-b"
    )
    assert fenced == ErrorCode.fenced_instance_id
    assert (await h.sync(restarted)).assignment == b"a1"


# ---------------------------------------------------------------------------------------------- offsets


@async_test
async def test_commit_and_fetch_offsets_persist_across_stores(tmp_path: Path) -> None:
    path = tmp_path / "dev-broker-consumer-offsets.json"
    h = Harness(OffsetStore(path))
    leader, _ = await h.stable_group(["a", "b"])
    errors = h.commit(leader.member_id, 1, {("t", 0): 10, ("t", 1): 20})
    assert errors == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    error, fetched = h.coordinator.fetch_offsets(group_id=GROUP, partitions=[("t", 0), ("t", 5)])
    assert error == ErrorCode.none
    assert fetched == {("t", 0): CommittedOffset(10, 7, "m10", 1234), ("t", 5): None}
    _, everything = h.coordinator.fetch_offsets(group_id=GROUP, partitions=None)
    assert set(everything) == {("t", 0), ("t", 1)}
    assert h.coordinator.fetch_offsets(group_id="nobody", partitions=None) == (ErrorCode.none, {})

    reopened = OffsetStore(path)
    assert reopened.get(GROUP, "t", 1) == CommittedOffset(20, 7, "m20", 1234)
    assert reopened.groups() == {GROUP}
    # A restarted coordinator knows the group (Empty) and takes simple commits for it.
    restarted = Harness(reopened)
    assert restarted.coordinator.list_groups() == [GroupListing(GROUP, "", "Empty")]
    assert restarted.commit("", -1, {("t", 0): 11}) == {("t", 0): ErrorCode.none}
    assert OffsetStore(path).get(GROUP, "t", 0) == CommittedOffset(11, 7, "m11", 1234)


@async_test
async def test_commit_errors_and_states() -> None:
    h = Harness()
    leader, follower = await h.stable_group(["a", "b"])
    tp = ("t", 0)
    assert h.commit(leader.member_id, 2, {tp: 1}) == {tp: ErrorCode.illegal_generation}
    assert h.commit("nobody", 1, {tp: 1}) == {tp: ErrorCode.unknown_member_id}
    assert h.commit("", -1, {tp: 1}) == {tp: ErrorCode.unknown_member_id}  # the group has members
    assert h.commit(leader.member_id, 1, {tp: 1}, group_id="unknown") == {tp: ErrorCode.illegal_generation}
    # A simple consumer's commit creates an Empty group.
    assert h.commit("", -1, {tp: 5}, group_id="simple") == {tp: ErrorCode.none}
    assert h.state("simple") == "Empty"
    # PreparingRebalance: members of the current generation may still commit (Kafka 3.x).
    newcomer = h.start_join(await h.new_member_id("c"))
    await settle()
    assert h.commit(follower.member_id, 1, {tp: 2}) == {tp: ErrorCode.none}
    # CompletingRebalance: REBALANCE_IN_PROGRESS.
    rejoins = [h.start_join(leader.member_id), h.start_join(follower.member_id)]
    results = await asyncio.gather(*rejoins, newcomer)
    assert h.state() == "CompletingRebalance"
    assert h.commit(follower.member_id, 2, {tp: 3}) == {tp: ErrorCode.rebalance_in_progress}
    await h.sync_all(list(results))
    too_long = {tp: CommittedOffset(4, -1, "x" * 4097, 0), ("t", 1): CommittedOffset(4, -1, None, 0)}
    errors = h.coordinator.commit_offsets(
        group_id=GROUP, generation_id=2, member_id=follower.member_id, group_instance_id=None, offsets=too_long
    )
    assert errors == {tp: ErrorCode.offset_metadata_too_large, ("t", 1): ErrorCode.none}
    assert h.store.get(GROUP, "t", 0) == CommittedOffset(2, 7, "m2", 1234)


def test_corrupt_offsets_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    path.write_text("{not json")
    with pytest.raises(CorruptOffsetsFileError, match="offsets.json"):
        OffsetStore(path)
    path.write_text(json.dumps({"version": 1, "offsets": [{"group": "g", "topic": "t", "partition": "0"}]}))
    with pytest.raises(CorruptOffsetsFileError, match=r"offsets\[0\]\.offset"):
        OffsetStore(path)
    path.write_text("")
    with pytest.raises(CorruptOffsetsFileError):
        OffsetStore(path)


def test_offset_store_deletes_by_group_and_topic(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "offsets.json"
    store = OffsetStore(path)
    store.commit("g1", {("t", 0): CommittedOffset(1, -1, None, 0), ("u", 0): CommittedOffset(2, -1, "", 0)})
    store.commit("g2", {("t", 1): CommittedOffset(3, 0, "x", 0)})
    store.delete_topic("t")
    assert OffsetStore(path).partitions("g1") == {("u", 0): CommittedOffset(2, -1, "", 0)}
    assert OffsetStore(path).groups() == {"g1"}
    store.delete_group("g1")
    assert OffsetStore(path).groups() == set()
    assert not list(path.parent.glob("*.tmp"))


# ---------------------------------------------------------------------------------------------- admin APIs


@async_test
async def test_list_and_describe_groups() -> None:
    h = Harness()
    leader, follower = await h.stable_group(["a", "b"])
    h.commit("", -1, {("t", 0): 1}, group_id="simple")
    stable, simple = GroupListing(GROUP, "consumer", "Stable"), GroupListing("simple", "", "Empty")
    assert h.coordinator.list_groups() == [stable, simple]
    assert h.coordinator.list_groups(["stable"]) == [stable]
    assert h.coordinator.list_groups(["Empty", "Dead"]) == [simple]

    description = h.coordinator.describe_group(GROUP)
    assert (description.error_code, description.state) == (ErrorCode.none, "Stable")
    assert (description.protocol_type, description.protocol_name) == ("consumer", "range")
    assert [(m.member_id, m.client_id, m.client_host, m.metadata, m.assignment) for m in description.members] == [
        (leader.member_id, "a", "/127.0.0.1", b"range-meta", b"a0"),
        (follower.member_id, "b", "/127.0.0.1", b"range-meta", b"a1"),
    ]
    unknown = h.coordinator.describe_group("nobody")
    assert (unknown.error_code, unknown.state, unknown.members) == (ErrorCode.none, "Dead", [])
    assert h.coordinator.describe_group("nobody", unknown_group_error=True).error_code == ErrorCode.group_id_not_found


@async_test
async def test_delete_groups_and_topic_offsets() -> None:
    h = Harness()
    await h.stable_group(["a"])
    h.commit("", -1, {("t", 0): 1, ("u", 0): 2}, group_id="simple")
    h.commit("", -1, {("t", 0): 1}, group_id="only-t")
    assert h.coordinator.delete_groups([GROUP, "nobody"]) == {
        GROUP: ErrorCode.non_empty_group,
        "nobody": ErrorCode.group_id_not_found,
    }
    h.coordinator.delete_topic_offsets("t")
    assert h.store.partitions("simple") == {("u", 0): CommittedOffset(2, 7, "m2", 1234)}
    assert [g.group_id for g in h.coordinator.list_groups()] == [GROUP, "simple"]  # "only-t" lost its last offset
    assert h.coordinator.delete_groups(["simple"]) == {"simple": ErrorCode.none}
    assert h.store.groups() == set()
    assert h.state("simple") == "Dead"


# ---------------------------------------------------------------------------------------------- lifecycle


@async_test
async def test_close_wakes_every_waiter() -> None:
    h = Harness()
    waiting = h.start_join(await h.new_member_id("a"))
    await settle()
    await h.coordinator.close()
    assert (await waiting).error_code == ErrorCode.not_coordinator
    assert h.heartbeat("anyone", 1) == ErrorCode.coordinator_not_available
    assert (await h.join()).error_code == ErrorCode.coordinator_not_available


@async_test
async def test_background_task_completes_the_initial_delay() -> None:
    coordinator = GroupCoordinator(OffsetStore(None), initial_rebalance_delay_ms=50, tick_interval_ms=10)
    await coordinator.start()
    try:
        joined: Awaitable[JoinResult] = coordinator.join_group(
            group_id=GROUP, member_id="", group_instance_id=None, client_id="c", client_host="/h",
            session_timeout_ms=10_000, rebalance_timeout_ms=1_000, protocol_type="consumer",
            protocols=PROTOCOLS, require_known_member_id=False,
        )
        result = await asyncio.wait_for(joined, timeout=30)
        assert (result.error_code, result.generation_id) == (ErrorCode.none, 1)
    finally:
        await coordinator.close()
