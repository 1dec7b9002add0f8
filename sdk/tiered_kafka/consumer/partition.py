"""One assigned partition in TieredConsumer: its handoff state, its remote reader, its ready records.

``PartitionState.handoff`` (``tiered_kafka.consumer.handoff``) owns the position and the source.
This module turns the remote reader's chunks into the records the application gets next and into
the handoff's events:

- a DATA chunk (``messages.RangeMessages``) gives its records at or after the position to
  ``ready``, a list the consumer hands out by slices from ``ready_pos`` (no per-record work). A
  range delivered whole (read_uncommitted, or read_committed's fast path) stays behind ``ready`` as
  its ``MessageSlices`` (``slices``), whose next slice of Messages is made when ``ready`` runs
  out: ``ready`` is empty only when ``slices`` is None. Under read_committed records pass
  ``tiered_kafka.transactions.CommittedFilter`` first (no aborted record, no control record, nothing
  behind an undecided transaction, nothing at or past the remote last stable offset: each chunk
  carries the one its plan was made with, and ``CommittedFilter.set_stable_end`` raises the
  filter's to it before its batches, releasing what the new value passes; so a REMOTE_ONLY reader
  waits at the remote LSO and goes on once the transaction's marker is uploaded, and the others
  hand over to Kafka there). ``skip_to`` is the offset after the last batch fully decided,
  so a position passes trailing control batches (committed lag reaches 0);
- END, BELOW_START and GAP chunks become ``remote_end``, ``remote_below_start`` and ``gap``, with
  the filter's ``first_held_offset`` as the handoff point (Kafka's own read_committed takes over
  there);
- an ERROR chunk is raised (the consumer's delivery turns TOPIC_AUTHORIZATION_FAILED into the
  handoff's ``authorization_failed``, and other failures into the partition's error message).
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import chain
from dataclasses import dataclass, field

from confluent_kafka import Message

from tiered_kafka.consumer.handoff import Decision, Handoff
from tiered_kafka.consumer.messages import MessageSlices, RangeMessages
from tiered_kafka.consumer.prefetch import Chunk, ChunkKind, RemoteReader
from tiered_kafka.errors import OffsetNotRemoteError
from tiered_kafka.transactions import CommittedFilter, Fate


@dataclass
class PartitionState:
    topic: str
    partition: int
    handoff: Handoff
    reader: RemoteReader | None = None
    ready: list[Message] = field(default_factory=list)  # records to deliver: ready[ready_pos:]
    ready_pos: int = 0
    slices: MessageSlices | None = None  # the rest of a range behind ``ready`` (its Messages not made yet)
    min_offset: int = 0  # records below it (before the position when ``slices`` was set) are not delivered
    committed_filter: CommittedFilter[Message] | None = None
    paused: bool = False
    pending: bool = False  # assigned, not started yet (a failed start is retried by the next poll)
    pending_offset: int = -1001  # where it was asked to start (an offset, or OFFSET_BEGINNING/END/STORED/INVALID)
    skip_to: int = -1  # past control/aborted records decided in remote data: the position once ready is empty
    held: Chunk | None = None  # the chunk whose records are in ``ready`` (its budget returns when they are taken)
    kafka_synced: bool = False  # librdkafka delivered this partition at our position since the last seek

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def position(self) -> int | None:
        return self.handoff.position

    @property
    def ready_count(self) -> int:
        return len(self.ready) - self.ready_pos

    def take_ready(self, out: list[Message], limit: int) -> int:
        """Move up to ``limit`` ready records to ``out``; the offset after the last one moved."""
        pos = self.ready_pos
        end = min(len(self.ready), pos + limit)
        out += self.ready[pos:end]
        next_offset: int = self.ready[end - 1].offset() + 1
        if end == len(self.ready):
            self.ready, self.ready_pos = [], 0
            self._refill()
        else:
            self.ready_pos = end
        return next_offset

    def take_ready_one(self) -> None:
        """The first ready record was delivered (``poll``'s shortcut)."""
        self.ready_pos += 1
        if self.ready_pos == len(self.ready):
            self.ready, self.ready_pos = [], 0
            self._refill()

    def _refill(self) -> None:
        """``ready`` ran out: the next slice of ``slices``, from ``min_offset`` on."""
        slices = self.slices
        while slices is not None and not self.ready:
            part = slices.take()
            if not part and slices:
                raise RuntimeError(f"{self.topic}-{self.partition}: a range's slices ended {len(slices)} records early")
            if not slices:
                self.slices = slices = None
            if part and part[0].offset() < self.min_offset:
                part = part[bisect_left(part, self.min_offset, key=Message.offset) :]
            self.ready, self.ready_pos = part, 0

    def release_held(self) -> None:
        if self.held is not None and self.reader is not None:
            self.reader.release(self.held)
        self.held = None

    def stop_remote(self) -> None:
        if self.reader is not None:
            self.release_held()
            self.reader.stop()
            self.reader = None
        self.ready, self.ready_pos, self.slices = [], 0, None
        self.committed_filter = None

    def first_held(self) -> int | None:
        return self.committed_filter.first_held_offset if self.committed_filter is not None else None

    def take_data(self, reader: RemoteReader, chunk: Chunk) -> Decision | None:
        """The chunk's wanted records into ``ready``; its budget is held until they are taken.
        A decision when the chunk turned out to be past remote storage's end (or below its start)."""
        position = self.handoff.position
        if chunk.future is None or position is None:
            raise RuntimeError(f"{self.topic}-{self.partition}: a data chunk without a fetch or a position")
        self.release_held()
        try:
            loaded: RangeMessages = chunk.future.result()
        except OffsetNotRemoteError as err:  # the segment left remote storage after it was planned
            reader.release(chunk)
            held = self.first_held()
            self.stop_remote()
            return self.handoff.remote_end(held) if err.past_the_end else self.handoff.remote_below_start(held)
        except BaseException:
            reader.release(chunk)
            self.stop_remote()
            raise
        self.held = chunk
        committed = self.committed_filter
        pieces: list[list[Message] | MessageSlices] = []  # records to deliver, in offset order, some may be below the position
        if committed is None:  # read_uncommitted: every record of the range
            if loaded.last_offset >= position:
                pieces.append(loaded.slices())
                self.skip_to = max(self.skip_to, loaded.last_offset + 1)
        else:
            committed.set_stable_end(chunk.stable_end)
            pieces.extend(batch.records for batch, fate in committed.take_released() if fate is Fate.DELIVER)
            stable_end = committed.stable_end
            # a range of plain batches all below the stable end is decided as one (the rule delivers
            # such batches as they come): one push instead of one per batch
            whole = loaded.plain and (stable_end is None or loaded.last_base_offset < stable_end)
            for batch in [loaded.as_one_batch()] if whole else loaded.batches():
                if batch.last_offset < position:
                    continue
                pieces.append(committed.push(batch))
                if committed.first_held_offset is None:
                    self.skip_to = max(self.skip_to, batch.last_offset + 1)
        self._set_ready(pieces, position)
        return None

    def _set_ready(self, pieces: list[list[Message] | MessageSlices], position: int) -> None:
        """``ready`` becomes what is left of it, then the records of ``pieces`` at or after ``position``
        (one list piece and nothing left: that list itself, from its first wanted index, with no
        copy). A last piece that is a ``MessageSlices`` becomes ``slices``; one before it is made
        into Messages now."""
        if self.slices is not None:  # (take_data runs when ready is empty: then slices is None)
            raise RuntimeError(f"{self.topic}-{self.partition}: new records while a range is being delivered")
        tail = pieces.pop() if pieces and isinstance(pieces[-1], MessageSlices) else None
        lists = [piece if isinstance(piece, list) else list(piece) for piece in pieces]
        lists = [piece for piece in lists if piece and piece[-1].offset() >= position]
        for i, piece in enumerate(lists):
            if piece[0].offset() < position:
                lists[i] = piece[bisect_left(piece, position, key=Message.offset) :]
        if self.ready_count:
            lists.insert(0, self.ready[self.ready_pos :])
        if len(lists) == 1:
            self.ready, self.ready_pos = lists[0], 0
        else:
            self.ready, self.ready_pos = list(chain.from_iterable(lists)), 0
        if tail is not None and len(tail):
            tail.skip_below(position)
            self.slices, self.min_offset = tail, position
            if not self.ready:
                self._refill()

    def end_of_remote(self, chunk: Chunk) -> Decision | None:
        """An END, BELOW_START, GAP or ERROR chunk as the handoff's event."""
        handoff, held = self.handoff, self.first_held()
        if chunk.kind is ChunkKind.END:
            self.stop_remote()
            return handoff.remote_end(held)
        if chunk.kind is ChunkKind.BELOW_START:
            self.stop_remote()
            return handoff.remote_below_start(held)
        if chunk.kind is ChunkKind.GAP:
            if chunk.gap is None:
                raise RuntimeError("a GAP chunk without its gap")
            return handoff.gap(chunk.gap.start_offset, chunk.gap.end_offset, chunk.gap.reason, held)
        self.stop_remote()  # ERROR: surfaces now; the next poll restarts the reader at the same position
        raise chunk.error if chunk.error is not None else RuntimeError("remote read failed")
