"""The coverage pages (``tiered_kafka_gateway.ui``): HTML under ``/ui/``, out of the OpenAPI description.

Authentication and authorization are the API's (``deps``): the ``Authenticate`` middleware answers
401 before any page without a valid token; the overview lists only the topics the token's
patterns cover; a topic's or a partition's page for a topic they do not cover is the API's 403
``topic_authorization_failed`` (``deps.Topic``), before any lookup. Errors are the API's JSON
envelope, with its status.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from tiered_kafka_gateway.deps import Caller, Cluster, PartitionId, Settings, Topic, visible_clusters
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.ui import UI_PREFIX, data, pages

router = APIRouter(prefix=UI_PREFIX, include_in_schema=False, default_response_class=HTMLResponse)
MAX_SEGMENT_ROWS = 1000
PageNumber = Annotated[int, Query(ge=0, le=10**9, description="page, from 0")]


@router.get("/", name="uiIndex")
def index(settings: Settings, caller: Caller) -> HTMLResponse:
    return HTMLResponse(pages.index_page(visible_clusters(settings, caller)))


@router.get("/clusters/{cluster}", name="uiCluster")
def cluster_overview(cluster: Cluster, caller: Caller, request: Request, page: PageNumber = 0) -> HTMLResponse:
    rows, shown, complete = data.overview(cluster, caller, page)
    listener = _listener_of(request, cluster.name)
    return HTMLResponse(pages.overview_page(cluster.name, rows, shown, complete, bool(cluster.bootstrap_servers), listener))


def _listener_of(request: Request, cluster: str) -> pages.ListenerView | None:
    """Where Kafka clients reach this cluster's Kafka listener (issue 35), when it runs in this process."""
    running = getattr(getattr(request.app.state, "kafka_listeners", None), "running", {})
    listener = running.get(cluster)
    if listener is None or not listener.port:
        return None
    ctx = listener.ctx
    tls = ctx.settings.tls_certfile is not None
    protocol = ("SASL_SSL" if tls else "SASL_PLAINTEXT") if ctx.authenticate is not None else ("SSL" if tls else "PLAINTEXT")
    return pages.ListenerView(*ctx.advertised, ctx.settings.mode.name, protocol)


@router.get("/clusters/{cluster}/topics/{topic}", name="uiTopic")
def topic_coverage(
    cluster: Cluster, topic: Topic, page: PageNumber = 0, axis: Annotated[Literal["offset", "time"], Query(description="the bars' axis")] = "offset"
) -> HTMLResponse:
    views, shown = data.topic_partitions(cluster, topic, page)
    return HTMLResponse(pages.topic_page(cluster.name, topic, views, shown, axis == "time"))


@router.get("/clusters/{cluster}/topics/{topic}/partitions/{partition}", name="uiPartition")
def partition_coverage(
    cluster: Cluster,
    topic: Topic,
    partition: PartitionId,
    page: PageNumber = 0,
    rows: Annotated[int, Query(ge=1, le=MAX_SEGMENT_ROWS, description="segments a page")] = data.SEGMENT_PAGE_ROWS,
) -> HTMLResponse:
    view = data.partition_view(cluster, topic, partition)
    if view.info is None and view.coverage is None and not view.gaps and view.kafka is None:
        raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no data for {topic}-{partition} in cluster {cluster.name}")
    shown, number = data.segment_page(cluster, view, page, rows)
    return HTMLResponse(pages.partition_page(cluster.name, view, shown, number, rows))
