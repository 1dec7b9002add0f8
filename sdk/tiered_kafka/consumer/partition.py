"""One assigned partition in TieredConsumer: its handoff state, its remote reader, its ready records.

``PartitionState.handoff`` (``tiered_kafka.consumer.handoff``) owns the position and the source.
This module turns the remote reader's chunks into the records the application gets next and into
the handoff's events:

- a DATA chunk's records at or after the position go to ``ready``; under read_committed they pass
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
- an ERROR chunk is raised, except TOPIC_AUTHORIZATION_FAILED, which is the handoff's
  ``authorization_failed`` (an error message for the partition, no further progress).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from confluent_kafka import Message

from tiered_kafka.consumer.handoff import Decision, Handoff
from tiered_kafka.consumer.prefetch import Chunk, ChunkKind, RemoteReader
from tiered_kafka.consumer.tiers import is_authorization_failure
from tiered_kafka.errors import OffsetNotRemoteError
from tiered_kafka.transactions import CommittedFilter, Fate


class AuthorizationFailure(Exception):
    """Internal: an ERROR chunk carried the gateway's 403 (``error`` is it)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class PartitionState:
    topic: str
    partition: int
    handoff: Handoff
    reader: RemoteReader | None = None
    ready: deque[Message] = field(default_factory=deque)
    committed_filter: CommittedFilter[Message] | None = None
    paused: bool = False
    pending: bool = False  # assigned, but its start failed (retried by the next poll)
    skip_to: int = -1  # past control/aborted records decided in remote data: the position once ready is empty
    held: Chunk | None = None  # the chunk whose records are in ``ready`` (its budget returns when they are taken)
    kafka_synced: bool = False  # librdkafka delivered this partition at our position since the last seek

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def position(self) -> int | None:
        return self.handoff.position

    def release_held(self) -> None:
        if self.held is not None and self.reader is not None:
            self.reader.release(self.held)
        self.held = None

    def stop_remote(self) -> None:
        if self.reader is not None:
            self.release_held()
            self.reader.stop()
            self.reader = None
        self.ready.clear()
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
            batches = chunk.future.result()
        except OffsetNotRemoteError as err:  # the segment left remote storage after it was planned
            reader.release(chunk)
            held = self.first_held()
            self.stop_remote()
            return self.handoff.remote_end(held) if err.past_the_end else self.handoff.remote_below_start(held)
        except BaseException:
            reader.release(chunk)
            self.stop_remote()
            raise
        ready = self.ready
        committed = self.committed_filter
        if committed is not None:
            committed.set_stable_end(chunk.stable_end)
            for batch, fate in committed.take_released():
                if fate is Fate.DELIVER:
                    ready.extend(m for m in batch.records if m.offset() >= position)
        for batch in batches:
            if batch.last_offset < position:
                continue
            records = batch.records if committed is None else committed.push(batch)
            if batch.base_offset >= position and committed is None:
                ready.extend(records)  # the common case: the whole batch is wanted
            else:
                ready.extend(m for m in records if m.offset() >= position)
            if committed is None or committed.first_held_offset is None:
                self.skip_to = max(self.skip_to, batch.last_offset + 1)
        self.held = chunk
        return None

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
        error = chunk.error if chunk.error is not None else RuntimeError("remote read failed")
        if is_authorization_failure(error):
            raise AuthorizationFailure(error)
        raise error
