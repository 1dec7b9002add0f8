"""Data path APIs: Produce, Fetch, ListOffsets, DeleteRecords.

Produce appends the client's record batches byte for byte through the format core's log.dir
writer, which assigns offsets and the leader epoch and applies Kafka's append rules (batch sizes,
producer epochs and sequences, a duplicate answered with its original offset); a transactional
batch must also belong to its producer's ongoing transaction (KIP-890's check, else
INVALID_TXN_STATE), and clients may not write control batches (INVALID_RECORD). Fetch serves the
segment files' bytes without re-encoding them, long-polling on max_wait/min_bytes; every response
carries the last stable offset, and isolation_level 1 (read_committed) stops at it and lists the
aborted transactions of the range (Kafka's ``collectAbortedTransactions``). ListOffsets LATEST
under read_committed answers the LSO, and a timestamp lookup ignores offsets at or past it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tiered_kafka.errors import AppendRefusedError, CorruptRecordError, FormatError, LogWriteError, OffsetOutOfRangeError
from tiered_kafka.format.producer_state import AppendOrigin
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka_dev.broker.protocol import RequestContext, millis

if TYPE_CHECKING:
    from tiered_kafka.format.log_writer import PartitionLog
    from tiered_kafka_dev.broker.server import Broker

log = logging.getLogger(__name__)
LEADER_EPOCH = 0
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
READ_COMMITTED = 1


# -- Produce -----------------------------------------------------------------------------------


async def produce(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any] | None:
    """Append each partition's batches; acks=0 gets no response (Kafka sends none)."""
    acks = request.acks
    responses = []
    appended = False
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            plog = broker.logs.partition(topic.name, data.index)
            result: dict[str, Any] = {"index": data.index, "base_offset": -1, "log_append_time": -1, "log_start_offset": -1, "record_errors": []}
            if acks not in (-1, 0, 1):
                result["error_code"] = ErrorCode.invalid_required_acks
            elif plog is None:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                result.update(_append(broker, plog, (topic.name, data.index), data.records, getattr(request, "transactional_id", None)))
                appended = appended or result["error_code"] == ErrorCode.none
            partitions.append(result)
        responses.append({"name": topic.name, "partition_responses": partitions})
    if appended:
        broker.logs.notify_appended()
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time": 0}


def _append(broker: Broker, plog: PartitionLog, partition: tuple[str, int], records: bytes | None, transactional_id: str | None) -> dict[str, Any]:
    if not records:
        return {"error_code": ErrorCode.invalid_record, "error_message": "no records"}
    try:
        for batch in iter_batches(records):
            if batch.magic < 2:
                return {"error_code": ErrorCode.unsupported_for_message_format, "error_message": "Produce v3+ needs magic 2 batches"}
            if batch.is_control:
                return {"error_code": ErrorCode.invalid_record, "error_message": "clients may not write control batches"}
            if batch.is_transactional:
                error = broker.transactions.verify_produce(transactional_id, batch.producer_id, batch.producer_epoch, partition)
                if error != ErrorCode.none:
                    message = f"producer {batch.producer_id} epoch {batch.producer_epoch} of {transactional_id!r} may not write to {partition[0]}-{partition[1]}"
                    return {"error_code": error, "error_message": message}
        info = plog.append(records, leader_epoch=LEADER_EPOCH, origin=AppendOrigin.CLIENT)
    except AppendRefusedError as err:
        log.info("refused a produce to %s: %s", plog.directory.name, err)
        return {"error_code": ErrorCode[err.kafka_error], "error_message": str(err)}
    except CorruptRecordError as err:
        log.warning("refused a produce to %s: %s", plog.directory.name, err)
        return {"error_code": ErrorCode.corrupt_message, "error_message": str(err)}
    except (FormatError, LogWriteError) as err:
        log.warning("refused a produce to %s: %s", plog.directory.name, err)
        return {"error_code": ErrorCode.invalid_record, "error_message": str(err)}
    return {"error_code": ErrorCode.none, "base_offset": info.first_offset, "log_start_offset": plog.log_start_offset}


# -- Fetch -------------------------------------------------------------------------------------


async def fetch(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    """Kafka's delayed fetch: answer once min_bytes are available, an error occurs, or max_wait passes."""
    deadline = time.monotonic() + millis(request.max_wait) / 1000
    while True:
        responses, total, errors = _read_partitions(broker, request)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or errors or remaining <= 0:
            return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses}
        await broker.logs.wait_for_append(remaining)


def _read_partitions(broker: Broker, request: Any) -> tuple[list[dict[str, Any]], int, bool]:
    budget = getattr(request, "max_bytes", 2**31 - 1)
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    total, errors = 0, False
    responses = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {
                "partition_index": wanted.partition,
                "error_code": ErrorCode.none,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": None,
                "preferred_read_replica": -1,
                "records": b"",
            }
            plog = broker.logs.partition(topic.topic, wanted.partition)
            if plog is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                errors = True
            else:
                lso = plog.last_stable_offset
                entry.update(high_watermark=plog.log_end_offset, last_stable_offset=lso, log_start_offset=plog.log_start_offset)
                limit = min(wanted.partition_max_bytes, budget - total)
                try:
                    if read_committed:
                        entry["aborted_transactions"] = []
                    if limit > 0 or total == 0:
                        max_offset = lso if read_committed else None
                        _, data = plog.read(wanted.fetch_offset, max(limit, 0), min_one_batch=total == 0, max_offset=max_offset)
                        entry["records"] = data
                        if read_committed and data:
                            entry["aborted_transactions"] = _aborted(plog, wanted.fetch_offset, data)
                        total += len(data)
                        if data:
                            broker.fetched_bytes[(topic.topic, wanted.partition)] += len(data)
                except OffsetOutOfRangeError:
                    entry["error_code"] = ErrorCode.offset_out_of_range
                    errors = True
            partitions.append(entry)
        responses.append({"topic": topic.topic, "partitions": partitions})
    return responses, total, errors


def _aborted(plog: PartitionLog, fetch_offset: int, data: bytes) -> list[dict[str, int]]:
    """The aborted transactions that can touch the records read, up to the last batch's end."""
    upper = fetch_offset
    for batch in iter_batches(data, verify_crc=False, allow_truncated_tail=True):
        upper = batch.next_offset
    return [{"producer_id": t.producer_id, "first_offset": t.first_offset} for t in plog.aborted_transactions(fetch_offset, upper)]


# -- ListOffsets -------------------------------------------------------------------------------


async def list_offsets(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {"partition_index": wanted.partition_index, "error_code": ErrorCode.none, "timestamp": -1, "offset": -1, "leader_epoch": LEADER_EPOCH}
            plog = broker.logs.partition(topic.name, wanted.partition_index)
            if plog is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                entry.update(_offset_for(plog, wanted.timestamp, getattr(request, "isolation_level", 0) == READ_COMMITTED))
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


def _offset_for(plog: PartitionLog, timestamp: int, read_committed: bool = False) -> dict[str, int]:
    """EARLIEST (-2): the log start offset; LATEST (-1): the high watermark, or the LSO under
    read_committed; MAX_TIMESTAMP (-3, KIP-734): the record with the largest timestamp; otherwise
    the first record with a timestamp >= the target, or offset -1 when none (or, under
    read_committed, when it is at or past the LSO: Kafka's ``lastFetchableOffset``)."""
    if timestamp == EARLIEST_TIMESTAMP:
        return {"offset": plog.log_start_offset, "timestamp": -1}
    if timestamp == LATEST_TIMESTAMP:
        return {"offset": plog.last_stable_offset if read_committed else plog.log_end_offset, "timestamp": -1}
    if timestamp == MAX_TIMESTAMP:
        max_ts, offset = plog.max_timestamp()
        return {"offset": offset, "timestamp": max_ts}
    if timestamp < 0:
        return {"error_code": ErrorCode.invalid_request}
    found = plog.offset_for_timestamp(timestamp)
    if found is None or (read_committed and found[0] >= plog.last_stable_offset):
        return {"offset": -1, "timestamp": -1}
    return {"offset": found[0], "timestamp": found[1]}


# -- DeleteRecords -----------------------------------------------------------------------------


async def delete_records(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    """Move each partition's log start offset (offset -1: to the high watermark)."""
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {"partition_index": wanted.partition_index, "low_watermark": -1, "error_code": ErrorCode.none}
            plog = broker.logs.partition(topic.name, wanted.partition_index)
            if plog is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                target = plog.log_end_offset if wanted.offset == -1 else wanted.offset
                try:
                    if target < 0:
                        raise LogWriteError(f"offset {wanted.offset} is negative")
                    entry["low_watermark"] = plog.delete_records(target)
                    plog.apply_retention()
                except LogWriteError:
                    entry["error_code"] = ErrorCode.offset_out_of_range
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    broker.logs.write_checkpoints()
    return {"throttle_time": 0, "topics": topics}
