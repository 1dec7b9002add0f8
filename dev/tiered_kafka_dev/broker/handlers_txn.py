"""Transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn.

The state machine lives in ``transactions``; these handlers translate kio's versioned requests.
PRODUCER_FENCED (90, KIP-588) is answered only to versions that know it (InitProducerId v4+,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2+); older ones get INVALID_PRODUCER_EPOCH, as
Kafka's ``KafkaApis`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tiered_kafka_dev.broker.handlers_groups import requested_offsets
from tiered_kafka_dev.broker.protocol import RequestContext, millis

if TYPE_CHECKING:
    from tiered_kafka_dev.broker.server import Broker

#: api key -> first version that may receive PRODUCER_FENCED.
PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}
# Kafka's offset.metadata.max.bytes default, as the group coordinator applies it.
OFFSET_METADATA_MAX_BYTES = 4096


def _for_version(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.producer_fenced and ctx.api_version < PRODUCER_FENCED_SINCE.get(ctx.api_key, 0):
        return ErrorCode.invalid_producer_epoch
    return error


async def init_producer_id(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    """An idempotent producer gets a new producer id; a transactional one the coordinator's answer."""
    if request.transactional_id is None:
        return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": broker.transactions.allocate_producer_id(), "producer_epoch": 0}
    error, producer_id, epoch = broker.transactions.init_producer_id(
        request.transactional_id,
        millis(request.transaction_timeout),
        getattr(request, "producer_id", -1),
        getattr(request, "producer_epoch", -1),
    )
    broker.logs.notify_appended()  # an init may have aborted an open transaction
    return {"throttle_time": 0, "error_code": _for_version(ctx, error), "producer_id": producer_id, "producer_epoch": epoch}


async def add_partitions_to_txn(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    """v0-v3. Unknown partitions get UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED
    (nothing is added), as Kafka answers."""
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = {tp for tp in wanted if broker.logs.partition(*tp) is None}
    if unknown:
        errors = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted for tp in wanted}
    else:
        error = broker.transactions.add_partitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, wanted
        )
        errors = dict.fromkeys(wanted, _for_version(ctx, error))
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in errors.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": error})
    results = [{"name": t, "results_by_partition": ps} for t, ps in topics.items()]
    return {"throttle_time": 0, "results_by_topic_v3_and_below": results}


async def add_offsets_to_txn(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    error = broker.transactions.add_offsets(request.transactional_id, request.producer_id, request.producer_epoch, request.group_id)
    return {"throttle_time": 0, "error_code": _for_version(ctx, error)}


async def txn_offset_commit(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    """Offsets staged in the transaction, committed by its COMMIT marker (v0-v3; v3 carries the
    consumer's group metadata, checked like an OffsetCommit's)."""
    offsets = requested_offsets(request)
    error, txn = broker.transactions.txn_offset_commit(request.transactional_id, request.producer_id, request.producer_epoch, request.group_id)
    if txn is not None:
        error = broker.groups.txn_commit_error(
            group_id=request.group_id,
            generation_id=getattr(request, "generation_id", -1),
            member_id=getattr(request, "member_id", ""),
            group_instance_id=getattr(request, "group_instance_id", None),
        ) or ErrorCode.none
    errors: dict[tuple[str, int], ErrorCode] = {}
    for tp, committed in offsets.items():
        if error != ErrorCode.none:
            errors[tp] = error
        elif broker.logs.partition(*tp) is None:
            errors[tp] = ErrorCode.unknown_topic_or_partition
        elif committed.metadata is not None and len(committed.metadata) > OFFSET_METADATA_MAX_BYTES:
            errors[tp] = ErrorCode.offset_metadata_too_large
        else:
            errors[tp] = ErrorCode.none
    accepted = {tp: c for tp, c in offsets.items() if errors[tp] == ErrorCode.none}
    if txn is not None and accepted:
        broker.transactions.stage_offsets(txn, request.group_id, accepted)
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), e in errors.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": e})
    return {"throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


async def end_txn(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    error = broker.transactions.end_txn(request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
    broker.logs.notify_appended()
    return {"throttle_time": 0, "error_code": _for_version(ctx, error)}
