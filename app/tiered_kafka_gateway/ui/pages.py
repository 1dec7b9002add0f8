"""The coverage pages as HTML (pure: views of ``ui.data`` in, one self-contained document out).

No script and nothing fetched: the style sheet is inline, the pictures inline SVG (``ui.svg``), the
hover texts SVG ``<title>``s. Every value comes from the registry or Kafka through ``ui.data`` and
is escaped; links are relative to the page, so the pages work behind a path prefix as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from urllib.parse import quote

from tiered_kafka.modes import Mode
from tiered_kafka.registry import SegmentEntry
from tiered_kafka_gateway.ui import UI_PREFIX, handoffs, svg
from tiered_kafka_gateway.ui.data import Page, PartitionView, TopicRow

STYLE = """
body{font:14px system-ui,sans-serif;margin:1.2em;color:#222}
table{border-collapse:collapse;margin:.6em 0}th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child,table.facts td,table.gaps td{text-align:left}td.bad{color:#c00;font-weight:600}
nav.crumbs a{margin-right:.4em}.pager a,.pager span{margin-right:.8em}.note{color:#666}
svg.coverage text{font:11px sans-serif}svg .track{fill:#f2f2f2}svg .seg{fill:#3a3;stroke:#fff;stroke-width:.5}
svg .run{fill:#3a3}svg .gap{fill:#d00}svg .kafka{fill:#36c}svg .coverage{stroke:#000;stroke-dasharray:3 2}
svg line.tick{stroke:#ddd}.legend span{display:inline-block;margin-right:1em}.sw{display:inline-block;width:12px;height:10px;margin-right:3px}
"""


def document(title: str, crumbs: Sequence[tuple[str, str]], body: str) -> str:
    nav = " / ".join(f'<a href="{escape(href)}">{escape(text)}</a>' for text, href in crumbs)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{STYLE}</style></head>'
        f'<body><nav class="crumbs">{nav}</nav><h1>{escape(title)}</h1>{body}</body></html>'
    )


def cluster_href(cluster: str) -> str:
    return f"{UI_PREFIX}/clusters/{quote(cluster)}"


def topic_href(cluster: str, topic: str) -> str:
    return f"{cluster_href(cluster)}/topics/{quote(topic)}"


def partition_href(cluster: str, topic: str, partition: int) -> str:
    return f"{topic_href(cluster, topic)}/partitions/{partition}"


def index_page(clusters: Iterable[str]) -> str:
    items = "".join(f'<li><a href="{escape(cluster_href(c))}">{escape(c)}</a></li>' for c in clusters)
    return document("Remote storage coverage", [("clusters", f"{UI_PREFIX}/")], f'<ul class="clusters">{items}</ul>')


@dataclass(frozen=True)
class ListenerView:
    """The cluster's Kafka listener as clients reach it (issue 35): advertised address, mode, security protocol."""

    host: str
    port: int
    mode: str
    protocol: str

    def text(self, topic: str) -> str:
        """A paragraph naming the address and a ``kcat`` command that reads ``topic`` from its start."""
        address = f"{self.host}:{self.port}"
        security = "" if self.protocol == "PLAINTEXT" else f" -X security.protocol={self.protocol}" + (
            " -X sasl.mechanisms=PLAIN -X sasl.username=you -X sasl.password=&lt;your token&gt;" if self.protocol.startswith("SASL") else "")
        return (f'<p class="listener">Any Kafka client reads this cluster\'s history at <code>{escape(address)}</code> '
                f"(the gateway's Kafka listener, {escape(self.protocol)}, mode {escape(self.mode)}), for example "
                f"<code>kcat -C -b {escape(address)}{security} -t {escape(topic)} -o beginning -e</code></p>")


def overview_page(cluster: str, rows: Sequence[TopicRow], page: Page, complete: bool, kafka_configured: bool,
                  listener: ListenerView | None = None) -> str:
    head = "<tr><th>topic</th><th>partitions</th><th>bytes remote</th><th>records remote</th><th>oldest remote timestamp</th><th>gaps</th>"
    head += "<th>upload lag (offsets, sum / max)</th></tr>" if kafka_configured else "<th>upload lag</th></tr>"
    body = []
    for row in rows:
        views = row.views
        shown = f"{len(views)} of {row.partitions_total} (p{views[0].partition}..p{views[-1].partition})" if row.partial else str(row.partitions_total)
        gaps = sum(len(v.gaps) for v in views)
        oldest = min((t for v in views if (t := v.oldest_timestamp) is not None), default=None)
        body.append(
            f'<tr class="topic" data-topic="{escape(row.topic)}"><td><a href="{escape(topic_href(cluster, row.topic))}">{escape(row.topic)}</a></td>'
            f"<td>{shown}</td><td>{_bytes(sum(v.info.total_bytes for v in views if v.info))}</td><td>{sum(v.records for v in views):,}</td>"
            f'<td>{svg.format_ms(oldest)}</td><td class="{"bad" if gaps else ""}">{gaps}</td><td>{_lag(views, kafka_configured)}</td></tr>'
        )
    partitions = page.total_items
    summary = f'<p class="summary">{partitions} partitions with remote data in the cluster; those of topics visible to you are shown'
    summary += "" if complete else " (the S3 listing stopped at its bound: more may exist)"
    summary += "; Kafka's ranges from its bootstrap servers.</p>" if kafka_configured else "; no Kafka bootstrap servers are configured for this cluster.</p>"
    table = f'<table class="overview">{head}{"".join(body)}</table>' if body else '<p class="empty">No topic with remote data is visible to this token.</p>'
    if listener is not None:
        summary += listener.text(rows[0].topic if rows else "TOPIC")
    return document(f"Cluster {cluster}", [("clusters", f"{UI_PREFIX}/"), (cluster, cluster_href(cluster))], summary + table + pager(page, "partitions"))


def topic_page(cluster: str, topic: str, views: Sequence[PartitionView], page: Page, time_axis: bool) -> str:
    bars = [bar_of(v, partition_href(cluster, topic, v.partition)) for v in views]
    switch = f'<a href="?page={page.number}">offset axis</a>' if time_axis else f'<a href="?page={page.number}&amp;axis=time">time axis</a>'
    body = f'<p class="axis">Axis: {"time (segments by their min/max timestamps)" if time_axis else "offsets"} — {switch}</p>'
    body += legend(time_axis) + svg.chart(bars, time_axis=time_axis) + pager(page, "partitions", "&amp;axis=time" if time_axis else "")
    crumbs = [("clusters", f"{UI_PREFIX}/"), (cluster, cluster_href(cluster)), (topic, topic_href(cluster, topic))]
    return document(f"Topic {topic}", crumbs, body)


def partition_page(cluster: str, view: PartitionView, rows: Sequence[SegmentEntry], page: Page, page_rows: int) -> str:
    remote = view.remote
    facts = [
        ("remote offsets", "none" if remote is None else f"{remote[0]}..{remote[1]}"),
        ("coverage start", "not recorded" if view.coverage is None else f"{view.coverage.offset} (observed {svg.format_ms(view.coverage.observed_ms)})"),
        ("Kafka", _kafka_text(view)),
        ("segments", f"{view.segment_count}, {_bytes(view.info.total_bytes if view.info else 0)}, {view.records:,} records"),
    ]
    facts += [("handoff " + m.value, "; ".join(k.text for k in handoffs.marks(m, layout_of(view))) or "reads nothing") for m in Mode]
    body = '<table class="facts">' + "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in facts) + "</table>"
    if view.gaps:
        body += '<h2>Gaps</h2><table class="gaps"><tr><th>offsets</th><th>reason</th><th>detected</th></tr>' + "".join(
            f'<tr><td class="bad">{g.start_offset}..{g.end_offset}</td><td>{escape(g.reason)}</td><td>{svg.format_ms(g.detected_ms)}</td></tr>' for g in view.gaps
        ) + "</table>"
    body += legend(False) + svg.chart([bar_of(view, "")])
    body += "<h2>Segments</h2>" + segment_table(rows) + pager(page, "segments", f"&amp;rows={page_rows}")
    crumbs = [("clusters", f"{UI_PREFIX}/"), (cluster, cluster_href(cluster)), (view.topic, topic_href(cluster, view.topic)), (f"partition {view.partition}", "")]
    return document(f"{view.topic}-{view.partition}", crumbs, body)


def segment_table(rows: Sequence[SegmentEntry]) -> str:
    head = "<tr><th>first offset</th><th>last offset</th><th>base offset</th><th>size</th><th>records</th><th>min timestamp</th><th>max timestamp</th><th>uploaded</th><th>files</th><th>object key</th></tr>"
    body = "".join(
        f'<tr class="segment"><td>{s.first_offset}</td><td>{s.last_offset}</td><td>{s.base_offset}</td><td>{s.size:,}</td><td>{_count(s.records_in_range)}</td>'
        f"<td>{svg.format_ms(s.min_timestamp)}</td><td>{svg.format_ms(s.max_timestamp)}</td><td>{svg.format_ms(s.upload_time_ms)}</td>"
        f'<td>{escape(",".join(s.files))}</td><td class="note">{escape(s.object_key)}</td></tr>'
        for s in rows
    )
    return f'<table class="segments">{head}{body}</table>'


def bar_of(view: PartitionView, href: str) -> svg.BarData:
    layout = layout_of(view)
    return svg.BarData(
        partition=view.partition,
        href=href,
        segments=[
            svg.SegmentSpan(s.first_offset, s.last_offset, s.min_timestamp, s.max_timestamp, f"segment {s.first_offset}..{s.last_offset}, {s.size:,} bytes, {_count(s.records_in_range)} records")
            for s in view.segments
        ] if view.all_segments else _summary_spans(view),
        gaps=view.gaps,
        kafka=view.kafka,
        coverage_start=None if view.coverage is None else view.coverage.offset,
        marks=[mark for mode in Mode for mark in handoffs.marks(mode, layout)],
        note=view.kafka_error or "",
    )


def _summary_spans(view: PartitionView) -> list[svg.SegmentSpan]:
    """A long partition's bar from its summary (``data`` module doc): its extent between its gaps,
    timed by its oldest and newest timestamps."""
    summary = view.summary
    low = -1 if summary is None or summary.oldest_timestamp is None else summary.oldest_timestamp
    high = -1 if summary is None or summary.newest_timestamp is None else summary.newest_timestamp
    return [
        svg.SegmentSpan(first, last, low, high, f"{view.segment_count:,} segments in all (offsets {first}..{last} here), {view.records:,} records")
        for first, last in view.runs()
    ]


def layout_of(view: PartitionView) -> handoffs.Layout:
    return handoffs.Layout(view.remote, view.gaps, view.kafka)


def legend(time_axis: bool) -> str:
    items = [("#3a3", "remote segment"), ("#d00", "recorded gap (hover: reason)")]
    if not time_axis:
        items += [("#36c", "Kafka: log start .. high watermark"), ("#000", "coverage start (dashed)")]
        items += [(svg.MODE_COLORS[m], f"{m.value} handoffs") for m in Mode]
    spans = "".join(f'<span><i class="sw" style="background:{c}"></i>{escape(t)}</span>' for c, t in items)
    note = "" if not time_axis else '<span class="note">Kafka\'s range, the coverage start and handoffs are offsets: shown on the offset axis only.</span>'
    return f'<p class="legend">{spans}{note}</p>'


def pager(page: Page, what: str, extra: str = "") -> str:
    if page.count <= 1:
        return f'<p class="pager"><span>{page.total_items} {what}</span></p>'
    links = [f'<a rel="prev" href="?page={page.number - 1}{extra}">previous</a>'] if page.number > 0 else []
    links.append(f"<span>page {page.number + 1} of {page.count} ({page.total_items} {what})</span>")
    if page.number + 1 < page.count:
        links.append(f'<a rel="next" href="?page={page.number + 1}{extra}">next</a>')
    return f'<p class="pager">{"".join(links)}</p>'


def _kafka_text(view: PartitionView) -> str:
    if view.kafka is not None:
        return f"log start {view.kafka[0]}, high watermark {view.kafka[1]}, upload lag {view.upload_lag}"
    return view.kafka_error or "no Kafka bootstrap servers configured"


def _lag(views: Sequence[PartitionView], kafka_configured: bool) -> str:
    if not kafka_configured:
        return "n/a (no Kafka configured)"
    lags = [lag for v in views if (lag := v.upload_lag) is not None]
    errors = sum(1 for v in views if v.kafka_error)
    text = f"{sum(lags):,} / {max(lags, default=0):,}" if lags else "-"
    return text + (f' <span class="bad">({errors} partitions: Kafka error)</span>' if errors else "")


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _count(n: int) -> str:
    return "unknown" if n < 0 else f"{n:,}"
