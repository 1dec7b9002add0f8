"""Records as JSON, for clients in any language (remote storage or proxied to Kafka)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tiered_kafka.modes import Mode
from tiered_kafka_gateway.deps import Cluster, PartitionId, Settings, Topic
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.models import RecordsResponse
from tiered_kafka_gateway.records import (
    DEFAULT_MAX_RECORDS,
    MAX_RECORDS_LIMIT,
    Encoding,
    IsolationLevel,
    ReadRequest,
    read_records,
)
from tiered_kafka_gateway.routes.partitions import ERRORS, TOPIC_ERRORS, Offset

router = APIRouter(prefix="/v1", responses=ERRORS)  # type: ignore[arg-type]


@router.get(
    "/clusters/{cluster}/topics/{topic}/partitions/{partition}/records",
    operation_id="readRecords",
    summary="Records from an offset, as JSON, from remote storage or Kafka per the consumption mode",
    description=(
        "Records of one source from `offset`, ending at `next_offset` (the next read starts there: no gap, no duplicate).\n\n"
        "`isolation_level=read_committed` over remote storage: aborted and control records are left out, and the response stops "
        "before a transaction whose marker is not in remote storage yet, or at the remote last stable offset; it then names that "
        "offset in `last_stable_offset`. When remote storage holds `offset` but delivers nothing for that reason: REMOTE_PREFERRED "
        "answers from Kafka at `offset` (`source: kafka`, Kafka's read_committed); REMOTE_ONLY, KAFKA_PREFERRED after Kafka refused "
        "the offset (below its log start), or no Kafka configured answer 200 with `records: []`, `next_offset == offset` and "
        "`last_stable_offset` set: the records are held behind an undecided transaction until its marker is uploaded."
    ),
    responses=TOPIC_ERRORS,  # type: ignore[arg-type]
)
def read_records_(
    cluster: Cluster,
    topic: Topic,
    partition: PartitionId,
    settings: Settings,
    offset: Offset,
    max_bytes: Annotated[int | None, Query(ge=1, description="bytes of record data to read (default: default_max_bytes)")] = None,
    max_records: Annotated[int, Query(ge=1, le=MAX_RECORDS_LIMIT, description="records to return at most")] = DEFAULT_MAX_RECORDS,
    encoding: Annotated[Encoding, Query(description="how keys, values and header values are written")] = Encoding.BASE64,
    mode: Annotated[Mode, Query(description="consumption mode: where the records are read")] = Mode.REMOTE_PREFERRED,
    isolation_level: Annotated[IsolationLevel, Query(description="read_committed leaves out aborted transactions")] = IsolationLevel.READ_UNCOMMITTED,
) -> RecordsResponse:
    wanted = settings.default_max_bytes if max_bytes is None else max_bytes
    if wanted > settings.max_bytes_limit:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"max_bytes {wanted} is above the limit {settings.max_bytes_limit}")
    request = ReadRequest(topic, partition, offset, wanted, max_records, encoding, mode, isolation_level)
    return read_records(cluster, request)
