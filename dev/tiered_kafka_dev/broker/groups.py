"""Consumer-group coordinator of the development broker: Kafka's classic group protocol as an asyncio state machine.

This follows Apache Kafka's classic (pre-KIP-848) group coordinator, ``kafka.coordinator.group.GroupCoordinator``
with ``GroupMetadata`` / ``MemberMetadata`` (Scala, Kafka 2.x-3.x), which the Java
``org.apache.kafka.coordinator.group.classic.ClassicGroup`` carries on unchanged. It covers JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups and DeleteGroups. The module knows
nothing of the wire protocol: the API handlers turn kio requests into calls here and the returned frozen
dataclasses into kio responses. Errors are :class:`kio.schema.errors.ErrorCode` members.

Group states (:class:`GroupState`) and transitions are Kafka's::

    Empty --join--> PreparingRebalance --all joined, or rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join of a new or changed member, leave, expiry--> PreparingRebalance
    PreparingRebalance --join completes with no member left--> Empty
    Empty --DeleteGroups--> Dead

Kafka's delayed operations become deadlines on the injected ``clock``, checked by
:meth:`GroupCoordinator.check_deadlines`, which the background task started by :meth:`GroupCoordinator.start`
runs every ``tick_interval_ms``:

* ``InitialDelayedJoin``: the first rebalance of an Empty group waits ``group.initial.rebalance.delay.ms``, and again
  (up to the rebalance timeout in total) while new members keep arriving;
* ``DelayedJoin``: a rebalance completes as soon as every member (and no pending member) has rejoined, else when
  the group's rebalance timeout (the largest ``rebalance_timeout_ms`` of its members) expires; dynamic members that
  did not rejoin are then removed;
* ``DelayedSync``: members of a new generation that send no SyncGroup within the rebalance timeout are removed;
* ``DelayedHeartbeat``: a member is removed when ``session_timeout_ms`` passes without a heartbeat (or sync / commit);
  members waiting in a JoinGroup or SyncGroup are exempt, except new members, whose first join expires after
  five minutes (``NewMemberJoinTimeoutMs``); a pending member (MEMBER_ID_REQUIRED) expires after its session timeout.

Everything runs on one asyncio loop. A JoinGroup or SyncGroup that has to wait gets a future resolved exactly once;
the coroutine awaits it through :func:`asyncio.shield`, so a client that disconnects (its handler task cancelled)
leaves the group intact and the eventual result is simply dropped, as Kafka does with a muted channel.

Deliberate differences from Kafka, all invisible to well-behaved clients:

* one coordinator for every group (no ``__consumer_offsets`` partitions, never NOT_COORDINATOR for a live broker);
  offsets live in :class:`~.offset_store.OffsetStore`, group membership only in memory (a restart empties groups,
  which clients see as UNKNOWN_MEMBER_ID and rejoin); groups with stored offsets reappear as Empty groups;
* no ``group.max.size`` and no offset retention;
* when a member's JoinGroup or SyncGroup is superseded by a newer one from the same member, Kafka leaves the older
  request unanswered; here it is answered with REBALANCE_IN_PROGRESS, and a waiting SyncGroup of a member that is
  removed gets UNKNOWN_MEMBER_ID, so that every future resolves;
* ties in the protocol vote go to the protocol voted first in member join order (Kafka: hash-map order);
  member lists (leader's JoinGroup, DescribeGroups) are in join order.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from kio.schema.errors import ErrorCode

from .offset_store import CommittedOffset, OffsetStore, OffsetStoreError

__all__ = [
    "CommittedOffset",
    "GroupCoordinator",
    "GroupDescription",
    "GroupListing",
    "GroupMember",
    "GroupState",
    "JoinResult",
    "MemberDescription",
    "SyncResult",
]

logger = logging.getLogger(__name__)

UNKNOWN_MEMBER_ID = ""
UNKNOWN_GENERATION_ID = -1
# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
# Kafka's offset.metadata.max.bytes default.
DEFAULT_OFFSET_METADATA_MAX_BYTES = 4096
DEFAULT_TICK_INTERVAL_MS = 100

TopicPartition = tuple[str, int]
_T = TypeVar("_T")


class GroupState(enum.Enum):
    """Kafka's classic group states; the value is the name DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's GroupState.validPreviousStates.
_VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True, slots=True)
class GroupMember:
    """A member as the leader's JoinGroup response lists it, with its metadata for the chosen protocol."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """A JoinGroup response. ``members`` is non-empty only for the leader (or a static leader told to skip
    the assignment, JoinGroup v9+); ``protocol_type`` / ``protocol_name`` are ``None`` on errors."""

    error_code: ErrorCode
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    member_id: str
    members: list[GroupMember] = field(default_factory=list)
    skip_assignment: bool = False

    @classmethod
    def failed(cls, member_id: str, error_code: ErrorCode) -> JoinResult:
        """Kafka's ``JoinGroupResult(memberId, error)``: no generation, protocol or leader."""
        return cls(error_code, UNKNOWN_GENERATION_ID, None, None, "", member_id)


@dataclass(frozen=True, slots=True)
class SyncResult:
    """A SyncGroup response: the member's assignment (``b""`` if the leader gave it none)."""

    error_code: ErrorCode
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes

    @classmethod
    def failed(cls, error_code: ErrorCode) -> SyncResult:
        """Kafka's ``SyncGroupResult(error)``."""
        return cls(error_code, None, None, b"")


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One ListGroups entry; ``protocol_type`` is ``""`` for a group only known by committed offsets."""

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One DescribeGroups member; ``metadata`` and ``assignment`` are empty unless the group is Stable."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """One DescribeGroups entry (Kafka's ``GroupSummary``); an unknown group is reported as ``Dead``."""

    error_code: ErrorCode
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: list[MemberDescription]


def _resolve(future: asyncio.Future[_T], result: _T) -> None:
    """Give ``future`` its result unless it is already done (cancelled by a gone client)."""
    if not future.done():
        future.set_result(result)


async def _outcome(outcome: _T | asyncio.Future[_T]) -> _T:
    """The immediate result, or the awaited one; the wait survives cancellation of the caller."""
    if isinstance(outcome, asyncio.Future):
        return await asyncio.shield(outcome)
    return outcome


@dataclass(frozen=True, slots=True)
class _JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool
    supports_skip_assignment: bool
    reason: str | None


@dataclass(eq=False, slots=True)
class _Member:
    """Kafka's ``MemberMetadata``: one member, its subscription protocols, assignment and waiting requests."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_deadline: float
    assignment: bytes = b""
    is_new: bool = True
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        return next((metadata for name, metadata in self.protocols if name == protocol), b"")

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates`` (Kafka's ``MemberMetadata.vote``)."""
        return next(name for name in self.protocol_names() if name in candidates)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, metadata and preference order (Kafka's ``MemberMetadata.matches``)."""
        return self.protocols == protocols

    def wait_for_join(self) -> asyncio.Future[JoinResult]:
        """A future for this member's JoinGroup response, superseding (and answering) any older one."""
        self.complete_join(JoinResult.failed(self.member_id, ErrorCode.rebalance_in_progress))
        self.join_future = asyncio.get_running_loop().create_future()
        return self.join_future

    def wait_for_sync(self) -> asyncio.Future[SyncResult]:
        """A future for this member's SyncGroup response, superseding (and answering) any older one."""
        self.complete_sync(SyncResult.failed(ErrorCode.rebalance_in_progress))
        self.sync_future = asyncio.get_running_loop().create_future()
        return self.sync_future

    def complete_join(self, result: JoinResult) -> bool:
        """Answer the waiting JoinGroup, if any (Kafka's ``maybeInvokeJoinCallback``)."""
        future, self.join_future = self.join_future, None
        if future is None:
            return False
        _resolve(future, result)
        return True

    def complete_sync(self, result: SyncResult) -> bool:
        """Answer the waiting SyncGroup, if any (Kafka's ``maybeInvokeSyncCallback``)."""
        future, self.sync_future = self.sync_future, None
        if future is None:
            return False
        _resolve(future, result)
        return True


@dataclass(eq=False)
class _Group:
    """Kafka's ``GroupMetadata``: membership, generation and the deadlines of the group's delayed operations."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    # MEMBER_ID_REQUIRED was answered with these ids; value: when the pending member expires.
    pending_members: dict[str, float] = field(default_factory=dict)
    # Members of the current generation that have not sent SyncGroup yet (Kafka's pendingSyncMembers).
    pending_sync: set[str] = field(default_factory=set)
    sync_deadline: float | None = None
    join_deadline: float | None = None
    # The armed join deadline is an InitialDelayedJoin (else a DelayedJoin).
    initial_join: bool = False
    initial_remaining_ms: int = 0
    new_member_added: bool = False

    def transition(self, target: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS_STATES[target]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state.value} -> {target.value}")
        self.state = target

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the members (Kafka's ``GroupMetadata.rebalanceTimeoutMs``)."""
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(member.awaiting_join for member in self.members.values())

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's ``supportsProtocols``: an Empty group takes any non-empty protocol list; otherwise the
        protocol type must match and one of the protocols must be supported by every current member."""
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocols)
        supporters = [set(member.protocol_names()) for member in self.members.values()]
        return self.protocol_type == protocol_type and any(
            sum(name in names for names in supporters) == len(supporters) for name, _ in protocols
        )

    def select_protocol(self) -> str:
        """Kafka's ``selectProtocol``: each member votes for its most preferred protocol among those all
        members support; the most votes wins (ties: the protocol voted first, in member join order)."""
        members = list(self.members.values())
        candidates = set(members[0].protocol_names()).intersection(*(m.protocol_names() for m in members[1:]))
        votes: dict[str, int] = {}
        for member in members:
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=votes.__getitem__)

    def current_member_metadata(self) -> list[GroupMember]:
        return [
            GroupMember(member.member_id, member.group_instance_id, member.metadata(self.protocol_name))
            for member in self.members.values()
        ]

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's ``validateCurrentMember``: a given instance id must map to ``member_id`` (else
        FENCED_INSTANCE_ID, or UNKNOWN_MEMBER_ID if unmapped) and the member must exist."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        return None if member_id in self.members else ErrorCode.unknown_member_id

    def add(self, member: _Member) -> None:
        """Kafka's ``GroupMetadata.add``: the first member fixes the protocol type, the first one in becomes leader."""
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> None:
        """Kafka's ``GroupMetadata.remove``; the leadership passes to the first remaining member. A request
        the member still has waiting is answered with UNKNOWN_MEMBER_ID."""
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        member = self.members.pop(member_id, None)
        if member is None:
            return
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        member.complete_join(JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id))
        member.complete_sync(SyncResult.failed(ErrorCode.unknown_member_id))

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> _Member:
        """Kafka's ``replaceStaticMember``: the instance's member takes a new id; whoever still waits on the
        old id is fenced with FENCED_INSTANCE_ID."""
        member = self.members.pop(old_member_id)
        member.complete_join(JoinResult.failed(old_member_id, ErrorCode.fenced_instance_id))
        member.complete_sync(SyncResult.failed(ErrorCode.fenced_instance_id))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member

    def elect_joined_leader(self) -> bool:
        """Kafka's ``maybeElectNewJoinedLeader``: keep the leader if it rejoined, else pick any rejoined member;
        False when there is no leader or no member rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        joined = next((member_id for member_id, m in self.members.items() if m.awaiting_join), None)
        if joined is None:
            return False
        self.leader_id = joined
        return True

    def init_next_generation(self) -> None:
        """Kafka's ``initNextGeneration``: bump the generation, pick the protocol, CompletingRebalance (or Empty)."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.transition(GroupState.EMPTY)
        self.pending_sync.clear()
        self.sync_deadline = None


class GroupCoordinator:
    """Kafka's classic group coordinator for every group of the development broker (see the module docstring).

    ``initial_rebalance_delay_ms`` is ``group.initial.rebalance.delay.ms``; ``min_session_timeout_ms`` and
    ``max_session_timeout_ms`` are ``group.min/max.session.timeout.ms``; ``clock`` returns seconds (monotonic)
    and drives every deadline; ``tick_interval_ms`` is how often the background task checks deadlines;
    ``offset_metadata_max_bytes`` is ``offset.metadata.max.bytes``.
    """

    def __init__(
        self,
        offsets: OffsetStore,
        *,
        initial_rebalance_delay_ms: int = 0,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 1_800_000,
        clock: Callable[[], float] = time.monotonic,
        tick_interval_ms: int = DEFAULT_TICK_INTERVAL_MS,
        offset_metadata_max_bytes: int = DEFAULT_OFFSET_METADATA_MAX_BYTES,
    ) -> None:
        self._offsets = offsets
        self._initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._min_session_timeout_ms = min_session_timeout_ms
        self._max_session_timeout_ms = max_session_timeout_ms
        self._clock = clock
        self._tick_interval_s = tick_interval_ms / 1000
        self._offset_metadata_max_bytes = offset_metadata_max_bytes
        # Groups known only by their committed offsets are loaded as Empty groups, as Kafka does.
        self._groups: dict[str, _Group] = {group_id: _Group(group_id) for group_id in sorted(offsets.groups())}
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._check_scheduled = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the background task that runs :meth:`check_deadlines` every tick."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run_deadlines(), name="group-coordinator-deadlines")

    async def close(self) -> None:
        """Stop the background task and answer every waiting JoinGroup / SyncGroup with NOT_COORDINATOR (what
        Kafka's ``onGroupUnloaded`` sends when a coordinator steps down). Later calls get COORDINATOR_NOT_AVAILABLE."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for group in self._groups.values():
            for member in group.members.values():
                member.complete_join(JoinResult.failed(member.member_id, ErrorCode.not_coordinator))
                member.complete_sync(SyncResult.failed(ErrorCode.not_coordinator))

    async def _run_deadlines(self) -> None:
        while True:
            await asyncio.sleep(self._tick_interval_s)
            try:
                self.check_deadlines()
            except Exception:  # keep expiring sessions even if one group hit a bug
                logger.exception("group coordinator deadline check failed")

    def check_deadlines(self) -> None:
        """Fire every due delayed operation: join completion (DelayedJoin / InitialDelayedJoin), pending-sync
        expiry (DelayedSync), and session expiry of members and pending members (DelayedHeartbeat)."""
        if self._closed:
            return
        now = self._clock()
        for group in list(self._groups.values()):
            self._check_group_deadlines(group, now)

    def _check_group_deadlines(self, group: _Group, now: float) -> None:
        if group.join_deadline is not None and now >= group.join_deadline:
            self._on_join_deadline(group)
        if group.sync_deadline is not None and now >= group.sync_deadline:
            self._on_expire_pending_sync(group)
        for member_id, deadline in list(group.pending_members.items()):
            if now >= deadline:
                logger.info("pending member %s of group %s expired", member_id, group.group_id)
                self._remove_pending_member_and_update_group(group, member_id)
        for member in list(group.members.values()):
            if group.members.get(member.member_id) is member and self._session_expired(member, now):
                logger.info("member %s of group %s failed (session timeout)", member.member_id, group.group_id)
                self._remove_member_and_update_group(group, member, "session timeout")

    @staticmethod
    def _session_expired(member: _Member, now: float) -> bool:
        """Kafka's ``!hasSatisfiedHeartbeat``: members waiting in a join or sync are exempt, unless new."""
        if now < member.session_deadline:
            return False
        return member.is_new or not (member.awaiting_join or member.awaiting_sync)

    def _schedule_check(self) -> None:
        """Run :meth:`check_deadlines` on the next loop iteration (a zero delay must not wait a whole tick)."""
        if self._check_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._check_scheduled = True
        loop.call_soon(self._scheduled_check)

    def _scheduled_check(self) -> None:
        self._check_scheduled = False
        self.check_deadlines()

    def _deadline(self, timeout_ms: int) -> float:
        return self._clock() + timeout_ms / 1000

    def _touch(self, member: _Member) -> None:
        """Kafka's ``completeAndScheduleNextHeartbeatExpiration``: the session starts over."""
        member.session_deadline = self._deadline(member.session_timeout_ms)

    def _group_error(self, group_id: str, *, allow_empty_id: bool = False) -> ErrorCode | None:
        """Kafka's ``validateGroupStatus``: INVALID_GROUP_ID for an empty id (allowed only for the offset and
        describe/delete APIs), COORDINATOR_NOT_AVAILABLE once closed."""
        if not group_id and not allow_empty_id:
            return ErrorCode.invalid_group_id
        if self._closed:
            return ErrorCode.coordinator_not_available
        return None

    # ------------------------------------------------------------------ JoinGroup

    async def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        reason: str | None = None,
        supports_skip_assignment: bool = False,
    ) -> JoinResult:
        """JoinGroup (Kafka's ``handleJoinGroup``); waits until the rebalance completes when it has to.

        ``require_known_member_id`` is JoinGroup v4+ without a group instance id; ``supports_skip_assignment``
        is JoinGroup v9+ (KIP-814); for v0 the API layer passes the session timeout as ``rebalance_timeout_ms``.
        """
        request = _JoinRequest(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=[(name, bytes(metadata)) for name, metadata in protocols],
            require_known_member_id=require_known_member_id,
            supports_skip_assignment=supports_skip_assignment,
            reason=reason,
        )
        return await _outcome(self._handle_join(request))

    def _handle_join(self, request: _JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        error = self._group_error(request.group_id)
        if error is None and not (
            self._min_session_timeout_ms <= request.session_timeout_ms <= self._max_session_timeout_ms
        ):
            error = ErrorCode.invalid_session_timeout
        if error is not None:
            return JoinResult.failed(request.member_id, error)
        group = self._groups.get(request.group_id)
        if group is None:
            # A group is created by a join with an empty member id; a known member id needs an existing group.
            if request.member_id != UNKNOWN_MEMBER_ID:
                return JoinResult.failed(request.member_id, ErrorCode.unknown_member_id)
            group = self._groups[request.group_id] = _Group(request.group_id)
        if request.member_id == UNKNOWN_MEMBER_ID:
            outcome = self._join_new_member(group, request)
        else:
            outcome = self._join_current_member(group, request)
        self._try_complete_join(group)
        return outcome

    def _join_new_member(self, group: _Group, request: _JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        """Kafka's ``doNewMemberJoinGroup``: generate a member id; a dynamic member of JoinGroup v4+ gets it back
        with MEMBER_ID_REQUIRED and is remembered as pending, a static one (KIP-345) joins right away."""
        if not group.supports_protocols(request.protocol_type, request.protocols):
            return JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol)
        new_member_id = f"{request.group_instance_id or request.client_id}-{uuid.uuid4()}"
        if request.group_instance_id is not None:
            old_member_id = group.static_members.get(request.group_instance_id)
            if old_member_id is not None:
                return self._update_static_member_and_rebalance(group, old_member_id, new_member_id, request)
        elif request.require_known_member_id:
            group.pending_members[new_member_id] = self._deadline(request.session_timeout_ms)
            logger.debug("group %s: new member id %s, asking the member to rejoin", group.group_id, new_member_id)
            return JoinResult.failed(new_member_id, ErrorCode.member_id_required)
        return self._add_member_and_rebalance(group, request, new_member_id)

    def _join_current_member(self, group: _Group, request: _JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        """Kafka's ``doCurrentMemberJoinGroup``: a pending member is added; a known member rebalances the group
        unless it is a follower rejoining with unchanged metadata, which just gets the current generation."""
        member_id = request.member_id
        if not group.supports_protocols(request.protocol_type, request.protocols):
            return JoinResult.failed(member_id, ErrorCode.inconsistent_group_protocol)
        if member_id in group.pending_members:
            if request.group_instance_id is not None:  # pending members are never static
                return JoinResult.failed(member_id, ErrorCode.unknown_member_id)
            return self._add_member_and_rebalance(group, request, member_id)
        error = group.validate_member(member_id, request.group_instance_id)
        if error is not None:
            return JoinResult.failed(member_id, error)
        member = group.members[member_id]
        unchanged = member.matches(request.protocols)
        if group.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # Probably a retry of a join whose response got lost: answer with the current generation.
            return self._current_generation_result(group, member)
        if group.state is GroupState.STABLE and unchanged and not group.is_leader(member_id):
            return self._current_generation_result(group, member)
        # PreparingRebalance; changed metadata; or the leader rejoining a Stable group (e.g. topic metadata changed).
        future = self._update_member(member, request)
        self._maybe_prepare_rebalance(group, f"member {member_id} rejoined ({request.reason or 'no reason given'})")
        return future

    def _add_member_and_rebalance(
        self, group: _Group, request: _JoinRequest, member_id: str
    ) -> asyncio.Future[JoinResult]:
        """Kafka's ``addMemberAndRebalance``. A new member waiting in its first join expires only after
        NewMemberJoinTimeoutMs (it cannot heartbeat yet)."""
        member = _Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            session_deadline=self._deadline(NEW_MEMBER_JOIN_TIMEOUT_MS),
        )
        future = member.wait_for_join()
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True  # lets the InitialDelayedJoin wait once more
        group.add(member)
        self._maybe_prepare_rebalance(group, f"new member {member_id} joined ({request.reason or 'no reason given'})")
        return future

    @staticmethod
    def _update_member(member: _Member, request: _JoinRequest) -> asyncio.Future[JoinResult]:
        """Kafka's ``GroupMetadata.updateMember``: new protocols and timeouts, and a waiting join."""
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        return member.wait_for_join()

    def _update_static_member_and_rebalance(
        self, group: _Group, old_member_id: str, new_member_id: str, request: _JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        """Kafka's ``updateStaticMemberAndRebalance`` (KIP-345/KIP-814): a known group instance rejoining with an
        empty member id takes a new member id. A Stable group whose protocol choice does not change answers at
        once without a rebalance: with JoinGroup v9+ the leader gets the members and ``skip_assignment``; before
        that everyone gets the old leader id, so that a rejoining leader does not assign."""
        assert request.group_instance_id is not None
        current_leader = group.leader_id or ""
        member = group.replace_static_member(request.group_instance_id, old_member_id, new_member_id)
        self._touch(member)
        future = self._update_member(member, request)
        reason = f"static member {request.group_instance_id} rejoined as {new_member_id}"
        if group.state is GroupState.STABLE:
            if group.select_protocol() != group.protocol_name:
                self._maybe_prepare_rebalance(group, reason + " with a protocol change")
                return future
            skip = request.supports_skip_assignment and group.is_leader(new_member_id)
            member.complete_join(
                JoinResult(
                    error_code=ErrorCode.none,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader_id=(group.leader_id or "") if request.supports_skip_assignment else current_leader,
                    member_id=new_member_id,
                    members=group.current_member_metadata() if skip else [],
                    skip_assignment=skip,
                )
            )
        elif group.state is GroupState.COMPLETING_REBALANCE:
            # The leader may already have assigned to the old member id: rebalance.
            self._prepare_rebalance(group, reason)
        return future

    def _current_generation_result(self, group: _Group, member: _Member) -> JoinResult:
        return JoinResult(
            error_code=ErrorCode.none,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            member_id=member.member_id,
            members=group.current_member_metadata() if group.is_leader(member.member_id) else [],
        )

    # ------------------------------------------------------------------ rebalance

    def _maybe_prepare_rebalance(self, group: _Group, reason: str) -> None:
        """Kafka's ``maybePrepareRebalance``: only Stable, CompletingRebalance and Empty groups can start one."""
        if group.state in _VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: _Group, reason: str) -> None:
        """Kafka's ``prepareRebalance``: waiting syncs get REBALANCE_IN_PROGRESS, the pending-sync timer stops,
        and the join timer starts: an InitialDelayedJoin for an Empty group, else a DelayedJoin."""
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        group.pending_sync.clear()
        group.sync_deadline = None
        rebalance_timeout_ms = group.rebalance_timeout_ms()
        group.initial_join = group.state is GroupState.EMPTY
        if group.initial_join:
            delay_ms = self._initial_rebalance_delay_ms
            group.initial_remaining_ms = max(rebalance_timeout_ms - delay_ms, 0)
        else:
            delay_ms = rebalance_timeout_ms
        logger.info(
            "group %s: preparing to rebalance in state %s with old generation %d (%s)",
            group.group_id, group.state.value, group.generation_id, reason,
        )
        group.transition(GroupState.PREPARING_REBALANCE)
        group.join_deadline = self._deadline(delay_ms)
        self._try_complete_join(group)
        if delay_ms <= 0:
            self._schedule_check()

    def _try_complete_join(self, group: _Group) -> None:
        """Kafka's ``tryCompleteJoin`` of a DelayedJoin: complete as soon as every member has rejoined (an
        InitialDelayedJoin only completes when its delay expires)."""
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not group.initial_join
            and group.has_all_members_joined()
        ):
            group.join_deadline = None
            self._complete_join(group)

    def _on_join_deadline(self, group: _Group) -> None:
        """The join timer expired: an InitialDelayedJoin waits once more if new members arrived meanwhile (up
        to the rebalance timeout in total), anything else completes the join."""
        group.join_deadline = None
        if group.initial_join and group.new_member_added and group.initial_remaining_ms > 0:
            group.new_member_added = False
            delay_ms = min(self._initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - delay_ms, 0)
            group.join_deadline = self._deadline(delay_ms)
            return
        self._complete_join(group)

    def _complete_join(self, group: _Group) -> None:
        """Kafka's ``onCompleteJoin``: drop dynamic members that did not rejoin, elect the leader, start the next
        generation and answer every waiting join (the member list goes to the leader only)."""
        absent = [m for m in group.members.values() if not m.awaiting_join and m.group_instance_id is None]
        for member in absent:
            group.remove(member.member_id)
        if absent:
            logger.info("group %s: removed members not rejoined: %s", group.group_id, [m.member_id for m in absent])
        if not group.elect_joined_leader() and group.members:
            # Only static members that have not rejoined remain: wait another rebalance timeout.
            logger.warning("group %s could not complete rebalance because no members rejoined", group.group_id)
            group.initial_join = False
            group.join_deadline = self._deadline(group.rebalance_timeout_ms())
            return
        group.init_next_generation()
        if group.state is GroupState.EMPTY:
            logger.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            return
        logger.info(
            "group %s: stabilized generation %d (protocol %s) with %d members, leader %s",
            group.group_id, group.generation_id, group.protocol_name, len(group.members), group.leader_id,
        )
        for member in group.members.values():
            member.complete_join(self._current_generation_result(group, member))
            self._touch(member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        group.sync_deadline = self._deadline(group.rebalance_timeout_ms())

    def _on_expire_pending_sync(self, group: _Group) -> None:
        """Kafka's ``onExpirePendingSync``: members of the generation that never sent SyncGroup are removed."""
        group.sync_deadline = None
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) or not group.pending_sync:
            return
        missing = sorted(group.pending_sync)
        for member_id in missing:
            group.remove(member_id)
        self._prepare_rebalance(group, f"members {missing} sent no SyncGroup in time")

    def _remove_member_and_update_group(self, group: _Group, member: _Member, reason: str) -> None:
        """Kafka's ``removeMemberAndUpdateGroup``: a waiting join gets UNKNOWN_MEMBER_ID, then the group rebalances
        (or, if already rebalancing, may now complete the join)."""
        member.complete_join(JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"removing member {member.member_id}: {reason}")
        else:
            self._try_complete_join(group)

    def _remove_pending_member_and_update_group(self, group: _Group, member_id: str) -> None:
        """Kafka's ``removePendingMemberAndUpdateGroup``."""
        group.pending_members.pop(member_id, None)
        self._try_complete_join(group)

    def _reset_and_propagate_assignment_error(self, group: _Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: _Group, error: ErrorCode) -> None:
        """Kafka's ``propagateAssignment``: answer every waiting SyncGroup; their sessions start over."""
        ok = error is ErrorCode.none
        for member in group.members.values():
            result = SyncResult(
                error,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
                member.assignment,
            )
            if member.complete_sync(result):
                self._touch(member)

    # ------------------------------------------------------------------ SyncGroup

    async def sync_group(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        """SyncGroup (Kafka's ``handleSyncGroup``). In CompletingRebalance a follower waits for the leader's sync,
        whose assignments (missing members: ``b""``) make the group Stable and answer everyone; in Stable the
        member's current assignment comes back at once."""
        outcome = self._handle_sync(
            group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name, assignments
        )
        return await _outcome(outcome)

    def _handle_sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult | asyncio.Future[SyncResult]:
        error = self._group_error(group_id)
        if error is not None:
            return SyncResult.failed(error)
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult.failed(ErrorCode.unknown_member_id)
        error = self._sync_error(group, generation_id, member_id, group_instance_id, protocol_type, protocol_name)
        if error is not None:
            return SyncResult.failed(error)
        member = group.members[member_id]
        if group.state is GroupState.STABLE:
            self._remove_pending_sync_member(group, member_id)
            self._touch(member)
            return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance
        future = member.wait_for_sync()
        self._remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            logger.info("group %s: assignment from leader %s, generation %d", group.group_id, member_id, generation_id)
            for each in group.members.values():
                each.assignment = bytes(assignments.get(each.member_id, b""))
            group.transition(GroupState.STABLE)
            self._propagate_assignment(group, ErrorCode.none)
        return future

    @staticmethod
    def _sync_error(
        group: _Group,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> ErrorCode | None:
        """Kafka's ``validateSyncGroup`` plus the state checks of ``doSyncGroup``."""
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if protocol_type is not None and protocol_type != group.protocol_type:
            return ErrorCode.inconsistent_group_protocol
        if protocol_name is not None and protocol_name != group.protocol_name:
            return ErrorCode.inconsistent_group_protocol
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        if group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        return None

    @staticmethod
    def _remove_pending_sync_member(group: _Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline = None

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup

    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """Heartbeat (Kafka's ``handleHeartbeat``): UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / ILLEGAL_GENERATION
        for a stranger; REBALANCE_IN_PROGRESS while PreparingRebalance, which tells members to rejoin; else NONE.
        A valid heartbeat restarts the member's session."""
        error = self._group_error(group_id)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        self._touch(group.members[member_id])
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, *, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """LeaveGroup (Kafka's ``handleLeaveGroup``): each ``(member_id, group_instance_id)`` leaves; an empty
        member id names a static member by instance id (admin removal). Returns the top-level error and one
        error per member; for LeaveGroup v0-2 the API layer reports the single member's error as top-level."""
        error = self._group_error(group_id)
        if error is not None:
            return error, []
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.none, [(mid, iid, ErrorCode.unknown_member_id) for mid, iid in members]
        return ErrorCode.none, [(mid, iid, self._leave(group, mid, iid)) for mid, iid in members]

    def _leave(self, group: _Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID:
            member_id = group.static_members.get(group_instance_id, "") if group_instance_id is not None else ""
            if not member_id:
                return ErrorCode.unknown_member_id
        elif member_id in group.pending_members:
            logger.info("pending member %s left group %s", member_id, group.group_id)
            self._remove_pending_member_and_update_group(group, member_id)
            return ErrorCode.none
        else:
            error = group.validate_member(member_id, group_instance_id)
            if error is not None:
                return error
        logger.info("member %s left group %s", member_id, group.group_id)
        self._remove_member_and_update_group(group, group.members[member_id], "LeaveGroup")
        return ErrorCode.none

    # ------------------------------------------------------------------ offsets

    def commit_offsets(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, CommittedOffset],
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit (Kafka's ``handleCommitOffsets``), one error per partition.

        A group with members takes commits only from a current member of the current generation (else
        UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / ILLEGAL_GENERATION); they are accepted in Stable and also in
        PreparingRebalance (members learn of the rebalance from their heartbeat) but get REBALANCE_IN_PROGRESS in
        CompletingRebalance. ``generation_id < 0`` with an empty member id is a commit from outside group
        management, allowed while the group is Empty or unknown (creating it). Metadata longer than
        ``offset.metadata.max.bytes`` gets OFFSET_METADATA_TOO_LARGE. Topic existence is the API layer's check.
        """
        error = self._commit_error(group_id, generation_id, member_id, group_instance_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        accepted = {
            tp: committed
            for tp, committed in offsets.items()
            if committed.metadata is None or len(committed.metadata) <= self._offset_metadata_max_bytes
        }
        try:
            self._offsets.commit(group_id, accepted)
        except OffsetStoreError:
            logger.exception("group %s: storing committed offsets failed", group_id)
            return dict.fromkeys(offsets, ErrorCode.unknown_server_error)
        return {tp: ErrorCode.none if tp in accepted else ErrorCode.offset_metadata_too_large for tp in offsets}

    def _commit_error(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        """Kafka's ``validateOffsetCommit`` and the state checks of ``doCommitOffsets``."""
        error = self._group_error(group_id, allow_empty_id=True)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return ErrorCode.illegal_generation  # a member of a generation the coordinator never had
            logger.info("creating simple consumer group %s via manual offset commit", group_id)
            group = self._groups[group_id] = _Group(group_id)
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
            if error is not None:
                return error
        elif group.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id  # only members commit for a group with members
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            self._touch(group.members[member_id])
        return None

    def txn_commit_error(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        """TxnOffsetCommit's group checks (Kafka's ``validateOffsetCommit`` with isTransactional): a commit
        naming a member or generation must come from a current member of the current generation; one naming
        neither (TxnOffsetCommit < v3) is accepted whatever the group's state. An unknown group is fine (the
        commit marker creates it)."""
        error = self._group_error(group_id, allow_empty_id=True)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None or (generation_id < 0 and member_id == UNKNOWN_MEMBER_ID and group_instance_id is None):
            return None
        error = group.validate_member(member_id, group_instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        return error

    def commit_transactional_offsets(self, group_id: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """A transaction's COMMIT marker: its TxnOffsetCommit offsets become the group's committed offsets
        (Kafka's ``handleTxnCompletion``), whatever the group's state; an unknown group is created Empty."""
        if group_id not in self._groups:
            self._groups[group_id] = _Group(group_id)
        try:
            self._offsets.commit(group_id, offsets)
        except OffsetStoreError:
            logger.exception("group %s: storing transactional offsets failed", group_id)

    def fetch_offsets(
        self, *, group_id: str, partitions: list[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, CommittedOffset | None]]:
        """OffsetFetch (Kafka's ``handleFetchOffsets``), whatever the group's state: ``partitions=None`` means every
        partition with a committed offset; a partition without one maps to ``None`` (offset -1 on the wire)."""
        error = self._group_error(group_id, allow_empty_id=True)
        if error is not None:
            return error, {}
        if partitions is None:
            partitions = list(self._offsets.partitions(group_id))
        return ErrorCode.none, {(topic, part): self._offsets.get(group_id, topic, part) for topic, part in partitions}

    def delete_topic_offsets(self, topic: str) -> None:
        """A topic was deleted (Kafka's ``handleDeletedPartitions``): its offsets go, and so does every Empty group
        that is left without offsets (Kafka's ``cleanupGroupMetadata``)."""
        try:
            self._offsets.delete_topic(topic)
        except OffsetStoreError:
            logger.exception("deleting committed offsets of topic %s failed", topic)
            return
        remaining = self._offsets.groups()
        for group in list(self._groups.values()):
            if group.state is GroupState.EMPTY and group.group_id not in remaining:
                self._drop_group(group)

    # ------------------------------------------------------------------ ListGroups, DescribeGroups, DeleteGroups

    def list_groups(self, states: list[str] | None = None) -> list[GroupListing]:
        """ListGroups: every group, or those in one of ``states`` (case-insensitive, ListGroups v4+; empty: all)."""
        if self._closed:
            return []
        wanted = {state.lower() for state in states} if states else None
        return [
            GroupListing(group.group_id, group.protocol_type or "", group.state.value)
            for group in self._groups.values()
            if wanted is None or group.state.value.lower() in wanted
        ]

    def describe_group(self, group_id: str, *, unknown_group_error: bool = False) -> GroupDescription:
        """DescribeGroups for one group (Kafka's ``handleDescribeGroup``). An unknown group is ``Dead`` with no
        error, or GROUP_ID_NOT_FOUND when ``unknown_group_error`` (DescribeGroups v6+). Protocol name, member
        metadata and assignments are only reported for a Stable group, as Kafka's ``GroupMetadata.summary``."""
        error = self._group_error(group_id, allow_empty_id=True)
        if error is not None:
            return GroupDescription(error, group_id, "", "", "", [])
        group = self._groups.get(group_id)
        if group is None:
            error = ErrorCode.group_id_not_found if unknown_group_error else ErrorCode.none
            return GroupDescription(error, group_id, GroupState.DEAD.value, "", "", [])
        stable = group.state is GroupState.STABLE
        members = [
            MemberDescription(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                metadata=member.metadata(group.protocol_name) if stable else b"",
                assignment=member.assignment if stable else b"",
            )
            for member in group.members.values()
        ]
        return GroupDescription(
            error_code=ErrorCode.none,
            group_id=group_id,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_name=(group.protocol_name or "") if stable else "",
            members=members,
        )

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """DeleteGroups (Kafka's ``handleDeleteGroups``): an Empty group and its offsets are deleted; a group with
        members gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND."""
        return {group_id: self._delete_group(group_id) for group_id in group_ids}

    def _delete_group(self, group_id: str) -> ErrorCode:
        error = self._group_error(group_id, allow_empty_id=True)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        try:
            self._offsets.delete_group(group_id)
        except OffsetStoreError:
            logger.exception("deleting committed offsets of group %s failed", group_id)
            return ErrorCode.unknown_server_error
        self._drop_group(group)
        return ErrorCode.none

    def _drop_group(self, group: _Group) -> None:
        group.transition(GroupState.DEAD)
        del self._groups[group.group_id]
        logger.info("group %s deleted", group.group_id)
