"""Cluster and topic administration APIs: ApiVersions, Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs (InitProducerId is with the transaction APIs, in ``handlers_txn``).

Each handler takes the kio request at whatever version the client sent and returns plain
values; ``protocol.build`` keeps the fields that exist at that version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tiered_kafka.format.log_config import TOPIC_CONFIG_NAMES
from tiered_kafka_dev.broker.protocol import RequestContext
from tiered_kafka_dev.broker.storage import TopicError

if TYPE_CHECKING:
    from tiered_kafka_dev.broker.server import Broker

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCE_STATIC_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5
CONFIG_TYPE_STRING = 2
CONFIG_TYPE_LONG = 5
NO_AUTHORIZED_OPERATIONS = -2147483648


def api_versions_body(error: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    from tiered_kafka_dev.broker.server import APIS

    return {
        "error_code": error,
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi, _) in sorted(APIS.items())],
        "throttle_time": 0,
    }


async def api_versions(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    return api_versions_body()


# -- Metadata ----------------------------------------------------------------------------------


def broker_entry(broker: Broker) -> dict[str, Any]:
    return {"node_id": broker.node_id, "host": broker.host, "port": broker.port, "rack": None}


def topic_metadata(broker: Broker, name: str, error: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    topic = broker.logs.topics.get(name)
    if topic is None:
        return {"error_code": error, "name": name, "topic_id": None, "is_internal": False, "partitions": []}
    partitions = [
        {
            "error_code": ErrorCode.none,
            "partition_index": p,
            "leader_id": broker.node_id,
            "leader_epoch": 0,
            "replica_nodes": [broker.node_id],
            "isr_nodes": [broker.node_id],
            "offline_replicas": [],
        }
        for p in range(topic.partitions)
    ]
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": partitions,
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


async def metadata(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    """Null topics (or an empty list at v0) means every topic; unknown topics are auto-created
    when the request allows it (v4+) and ``auto.create.topics.enable`` is on."""
    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        names = sorted(broker.logs.topics)
    else:
        names = [t.name for t in requested if t.name is not None]
    allow_create = getattr(request, "allow_auto_topic_creation", True) and broker.config.auto_create_topics
    topics = []
    for name in names:
        error = ErrorCode.none
        if name not in broker.logs.topics:
            error = ErrorCode.unknown_topic_or_partition
            if allow_create:
                try:
                    broker_create_topic(broker, name, broker.config.num_partitions, {})
                    error = ErrorCode.leader_not_available  # Kafka answers this while the topic is new
                except TopicError as err:
                    error = ErrorCode[err.kind]
        topics.append(topic_metadata(broker, name, error))
    return {
        "throttle_time": 0,
        "brokers": [broker_entry(broker)],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def broker_create_topic(broker: Broker, name: str, partitions: int, configs: dict[str, str], *, validate_only: bool = False) -> Any:
    topic = broker.logs.create_topic(name, partitions, configs, validate_only=validate_only)
    if not validate_only and broker.zookeeper is not None:
        broker.zookeeper.register_topic(topic)
    return topic


# -- CreateTopics / DeleteTopics --------------------------------------------------------------


async def create_topics(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    results = []
    for spec in request.topics:
        partitions = broker.config.num_partitions if spec.num_partitions == -1 else spec.num_partitions
        configs = {c.name: c.value for c in spec.configs if c.value is not None}
        result: dict[str, Any] = {"name": spec.name, "error_code": ErrorCode.none, "error_message": None}
        try:
            if spec.assignments:
                raise TopicError("invalid_replica_assignment", "manual replica assignment is not supported")
            if spec.replication_factor not in (-1, 1):
                raise TopicError(
                    "invalid_replication_factor",
                    f"replication factor {spec.replication_factor} is larger than the 1 available broker",
                )
            topic = broker_create_topic(broker, spec.name, partitions, configs, validate_only=request.validate_only)
            result.update(
                topic_id=topic.topic_id,
                num_partitions=topic.partitions,
                replication_factor=1,
                configs=[_config_entry(broker, topic.configs, n) for n in _topic_config_names()],
            )
        except TopicError as err:
            result.update(error_code=ErrorCode[err.kind], error_message=str(err), num_partitions=-1, replication_factor=-1)
        results.append(result)
    return {"throttle_time": 0, "topics": results}


async def delete_topics(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    names = list(getattr(request, "topic_names", ())) or [t.name for t in getattr(request, "topics", ())]
    responses = []
    for name in names:
        topic = broker.logs.topics.get(name)
        entry: dict[str, Any] = {"name": name, "topic_id": topic.topic_id if topic else None, "error_code": ErrorCode.none}
        try:
            broker.logs.delete_topic(name)
            broker.groups.delete_topic_offsets(name)
            if broker.zookeeper is not None:
                broker.zookeeper.unregister_topic(name)
        except TopicError as err:
            entry.update(error_code=ErrorCode[err.kind], error_message=str(err))
        responses.append(entry)
    return {"throttle_time": 0, "responses": responses}


# -- CreatePartitions --------------------------------------------------------------------------


async def create_partitions(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    """Kafka's ``ControllerApis.createPartitions`` and ``ReplicationControlManager.createPartitions``.

    Per topic: a name given twice is INVALID_REQUEST ("Duplicate topic name."); an unknown topic
    UNKNOWN_TOPIC_OR_PARTITION; a count not larger than the current one INVALID_PARTITIONS;
    explicit ``assignments`` must list one per new partition and, with the single broker, each
    must be exactly ``[node.id]`` (else INVALID_REPLICA_ASSIGNMENT, as for an unknown broker or
    a replication factor other than the topic's 1). ``validate_only`` checks without growing.
    In ZooKeeper mode the new partitions are registered like a ZooKeeper-mode controller does
    (``AdminZkClient.addPartitions`` rewrites the topic znode, then each new partition's state
    znode gets this broker as leader at epoch 0); existing partitions keep their leader epochs.
    """
    names = [t.name for t in request.topics]
    duplicates = {n for n in names if names.count(n) > 1}
    results: list[dict[str, Any]] = [
        {"name": n, "error_code": ErrorCode.invalid_request, "error_message": "Duplicate topic name."} for n in sorted(duplicates)
    ]
    for spec in request.topics:
        if spec.name in duplicates:
            continue
        result: dict[str, Any] = {"name": spec.name, "error_code": ErrorCode.none, "error_message": None}
        try:
            _check_partition_assignments(broker, spec)
            topic = broker.logs.add_partitions(spec.name, spec.count, validate_only=request.validate_only)
            if not request.validate_only and broker.zookeeper is not None:
                broker.zookeeper.register_topic(topic)
        except TopicError as err:
            result.update(error_code=ErrorCode[err.kind], error_message=str(err))
        results.append(result)
    return {"throttle_time": 0, "results": results}


def _check_partition_assignments(broker: Broker, spec: Any) -> None:
    if spec.assignments is None:
        return
    topic = broker.logs.topics.get(spec.name)
    if topic is None or spec.count <= topic.partitions:
        return  # add_partitions reports these with their own error codes, as Kafka checks them first
    additional = spec.count - topic.partitions
    if len(spec.assignments) != additional:
        raise TopicError(
            "invalid_replica_assignment",
            f"Attempted to add {additional} additional partition(s), but only {len(spec.assignments)} assignment(s) were specified.",
        )
    for i, assignment in enumerate(spec.assignments):
        if list(assignment.broker_ids) != [broker.node_id]:
            raise TopicError(
                "invalid_replica_assignment",
                f"assignment {list(assignment.broker_ids)} of partition {topic.partitions + i}: "
                f"the only broker is {broker.node_id} and the replication factor is 1",
            )


# -- DescribeConfigs ---------------------------------------------------------------------------


def _topic_config_names() -> list[str]:
    return sorted(TOPIC_CONFIG_NAMES)


def _config_entry(broker: Broker, configs: dict[str, str], name: str) -> dict[str, Any]:
    if name in configs:
        value, source = configs[name], CONFIG_SOURCE_DYNAMIC_TOPIC
    else:
        value, source = broker.config.log_defaults.to_topic_configs().get(name), CONFIG_SOURCE_DEFAULT
    return {
        "name": name,
        "value": value,
        "read_only": False,
        "is_default": source == CONFIG_SOURCE_DEFAULT,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": CONFIG_TYPE_LONG if name in TOPIC_CONFIG_NAMES else CONFIG_TYPE_STRING,
        "documentation": None,
    }


async def describe_configs(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    results = []
    for resource in request.resources:
        result: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [],
        }
        if resource.resource_type == RESOURCE_TOPIC:
            topic = broker.logs.topics.get(resource.resource_name)
            if topic is None:
                result.update(error_code=ErrorCode.unknown_topic_or_partition, error_message=f"topic {resource.resource_name!r} does not exist")
            else:
                names = sorted(set(_topic_config_names()) | set(topic.configs))
                wanted = resource.configuration_keys
                result["configs"] = [_config_entry(broker, topic.configs, n) for n in names if wanted is None or n in wanted]
        elif resource.resource_type == RESOURCE_BROKER and resource.resource_name in ("", str(broker.node_id)):
            values = {"broker.id": str(broker.node_id), "num.partitions": str(broker.config.num_partitions)}
            result["configs"] = [
                {**_config_entry(broker, values, n), "config_source": CONFIG_SOURCE_STATIC_BROKER, "is_default": False, "read_only": True}
                for n in sorted(values)
            ]
        else:
            result.update(error_code=ErrorCode.invalid_request, error_message=f"unsupported resource {resource.resource_type}/{resource.resource_name}")
        results.append(result)
    return {"throttle_time": 0, "results": results}
