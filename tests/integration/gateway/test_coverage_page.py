"""The coverage pages in a real browser (Debian's Chromium, headless, driven by Playwright) against a
real stack: the shared Kafka broker, the agent uploading to SeaweedFS and registering in Redis, and
the gateway on uvicorn with authentication on. Assertions are on the DOM and the SVG geometry;
a screenshot of each page goes to the test's tmp_path."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page

from tests.support.agent_env import agent_settings, delete_records, only_topics, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.kafka_clients import create_topic, produce_numbered
from tests.support.stack_env import gateway_server
from tiered_kafka.modes import Mode
from tiered_kafka.registry import Registry, SegmentEntry
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration

READER = "reader-token-" + "r" * 12
OUTSIDER = "outsider-token-" + "o" * 12
GAP_REASON = "test: segment lost <before upload>"  # markup in a reason must come out as text
KAFKA_LOG_START = 20  # partition 1's log start, moved by DeleteRecords


@dataclass
class Stack:
    url: str
    cluster: str
    topic: str
    registry: Registry
    lost: SegmentEntry  # partition 0's segment deleted and recorded as a gap


@pytest.fixture(scope="module")
def stack(kafka_server: Any, redis_server: Any, s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A two-partition topic on the shared broker, uploaded by the agent; partition 0 lost its
    second segment (a recorded gap), partition 1's log start moved to KAFKA_LOG_START."""
    topic = unique_topic("ui")
    bootstrap = kafka_server.bootstrap_servers
    create_topic(bootstrap, topic, 2, **{"segment.bytes": "16000", "index.interval.bytes": "4096"})
    produce_numbered(bootstrap, topic, 0, 160, 2)
    bucket = s3_server.create_bucket(unique_topic("ui-bucket"))
    settings = agent_settings(kafka_server.log_dir, redis_server, s3_server, bucket, topics=only_topics(topic))
    registry = registry_for(settings)
    with Agent(settings):
        for p in (0, 1):
            wait_for(lambda p=p: [s.base_offset for s in registry.segments(topic, p)] == rotated_bases(kafka_server.log_dir / f"{topic}-{p}"), what=f"{topic}-{p} uploaded")
    segments = registry.segments(topic, 0)
    assert len(segments) >= 4
    lost = segments[1]
    assert registry.delete_segment(topic, 0, lost.base_offset) is not None
    registry.record_gap(topic, 0, lost.base_offset, lost.last_offset, GAP_REASON)
    delete_records(bootstrap, topic, KAFKA_LOG_START, partition=1)
    auth = {"enabled": True, "tokens": {READER: ["ui-.*"], OUTSIDER: ["other-.*"]}}
    with gateway_server(settings, s3_server, bootstrap, auth=auth) as url:
        yield Stack(url, settings.cluster, topic, registry, lost)
    registry.client.close()


def open_page(browser: Browser, token: str, url: str) -> Page:
    context = browser.new_context(extra_http_headers={"Authorization": f"Bearer {token}"}, viewport={"width": 1100, "height": 700})
    page = context.new_page()
    response = page.goto(url)
    assert response is not None and response.status == 200, (url, response and response.status)
    return page


def shoot(page: Page, tmp_path: Path, name: str, *, close: bool = True) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    if close:
        page.context.close()


def test_overview_lists_the_topic_with_its_gap_and_kafka_lag(stack: Stack, browser: Browser, tmp_path: Path) -> None:
    page = open_page(browser, READER, f"{stack.url}/ui/")
    shoot(page, tmp_path, "index", close=False)
    page.click(f"text={stack.cluster}")
    row = page.locator(f'tr.topic[data-topic="{stack.topic}"]')
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == stack.topic and cells[1] == "2"
    assert cells[5] == "1"  # one recorded gap
    expected_records = sum(s.records_in_range for p in (0, 1) for s in stack.registry.segments(stack.topic, p))
    assert cells[3] == f"{expected_records:,}"
    lag = re.fullmatch(r"([\d,]+) / ([\d,]+)", cells[6])
    assert lag is not None and int(lag[1].replace(",", "")) > 0  # the active segments are never uploaded
    assert "visible to you" in page.inner_text("p.summary")
    shoot(page, tmp_path, "overview")


def test_topic_page_draws_the_gap_kafka_range_and_handoffs_where_their_offsets_map(stack: Stack, browser: Browser, tmp_path: Path) -> None:
    page = open_page(browser, READER, f"{stack.url}/ui/clusters/{stack.cluster}/topics/{stack.topic}")
    chart = page.locator("svg.coverage")
    lo, hi, x0, width = (float(chart.get_attribute(a) or "nan") for a in ("data-lo", "data-hi", "data-x0", "data-width"))
    assert lo == 0

    def x_of(offset: int) -> float:
        return x0 + (offset - lo) * width / (hi - lo)

    gap = page.locator('g.bar[data-partition="0"] rect.gap')
    assert gap.count() == 1
    assert (int(gap.get_attribute("data-start") or -1), int(gap.get_attribute("data-end") or -1)) == (stack.lost.base_offset, stack.lost.last_offset)
    box = {a: float(gap.get_attribute(a) or "nan") for a in ("x", "width")}
    assert box["x"] == pytest.approx(x_of(stack.lost.base_offset), abs=0.01)
    assert box["width"] == pytest.approx(max(x_of(stack.lost.last_offset + 1) - x_of(stack.lost.base_offset), 2.0), abs=0.01)
    assert GAP_REASON in gap.locator("title").text_content()  # the reason on hover, as text
    # the rendered geometry agrees with the attributes (the browser laid it out)
    rendered = gap.bounding_box()
    svg_box = chart.bounding_box()
    assert rendered is not None and svg_box is not None
    assert rendered["x"] - svg_box["x"] == pytest.approx(box["x"], abs=0.6)

    # no segment overlaps the gap; the remote segments of partition 0 are drawn one by one
    segs = page.locator('g.bar[data-partition="0"] rect.seg')
    assert segs.count() == len(stack.registry.segments(stack.topic, 0))
    for i in range(segs.count()):
        start, end = int(segs.nth(i).get_attribute("data-start") or -1), int(segs.nth(i).get_attribute("data-end") or -1)
        assert end < stack.lost.base_offset or start > stack.lost.last_offset

    kafka = page.locator('g.bar[data-partition="1"] rect.kafka')
    assert int(kafka.get_attribute("data-start") or -1) == KAFKA_LOG_START
    assert float(kafka.get_attribute("x") or "nan") == pytest.approx(x_of(KAFKA_LOG_START), abs=0.01)

    # each mode's handoff marks: REMOTE_PREFERRED leaves remote storage for Kafka at its end, after the last registered offset
    last = stack.registry.partition_info(stack.topic, 1)
    assert last is not None
    to_kafka = page.locator(f'g.bar[data-partition="1"] rect.handoff[data-kind="kafka"][data-mode="{Mode.REMOTE_PREFERRED.value}"]')
    assert [int(v) for v in to_kafka.evaluate_all("els => els.map(e => e.dataset.offset)")] == [last.latest_offset + 1]
    waits = page.locator(f'g.bar[data-partition="1"] rect.handoff[data-kind="wait"][data-mode="{Mode.REMOTE_ONLY.value}"]')
    assert waits.count() == 1 and int(waits.get_attribute("data-offset") or -1) == last.latest_offset + 1
    for mode in Mode:
        assert page.locator(f'g.bar[data-partition="0"] rect.handoff[data-mode="{mode.value}"]').count() >= 1, mode
    shoot(page, tmp_path, "topic")

    timed = open_page(browser, READER, f"{stack.url}/ui/clusters/{stack.cluster}/topics/{stack.topic}?axis=time")
    assert timed.get_attribute("svg.coverage", "data-axis") == "time"
    assert timed.locator('g.bar[data-partition="1"] rect.seg').count() == len(stack.registry.segments(stack.topic, 1))
    assert timed.locator("rect.kafka").count() == 0
    shoot(timed, tmp_path, "topic-time-axis")


def test_partition_page_pages_its_segment_table(stack: Stack, browser: Browser, tmp_path: Path) -> None:
    segments = stack.registry.segments(stack.topic, 0)
    page = open_page(browser, READER, f"{stack.url}/ui/clusters/{stack.cluster}/topics/{stack.topic}/partitions/0?rows=2")
    seen: list[int] = []
    while True:
        seen += [int(t) for t in page.locator("tr.segment td:first-child").all_inner_texts()]
        following = page.locator('a[rel="next"]')
        if following.count() == 0:
            break
        following.click()
    assert seen == [s.first_offset for s in segments]
    assert GAP_REASON in page.inner_text("table.gaps")
    shoot(page, tmp_path, "partition")


def test_a_token_without_the_topic_sees_nothing_of_it(stack: Stack, browser: Browser, tmp_path: Path) -> None:
    page = open_page(browser, OUTSIDER, f"{stack.url}/ui/clusters/{stack.cluster}")
    assert stack.topic not in page.content()
    assert page.locator("p.empty").count() == 1
    shoot(page, tmp_path, "overview-outsider")
    base = f"{stack.url}/ui/clusters/{stack.cluster}/topics/{stack.topic}"
    for path in ("", "?axis=time", "/partitions/0", "/partitions/1"):
        denied = httpx.get(base + path, headers={"Authorization": f"Bearer {OUTSIDER}"})
        assert (denied.status_code, denied.json()["error"]["code"]) == (403, "topic_authorization_failed"), path
        assert set(denied.json()) == {"error"} and "segment" not in denied.text
        assert httpx.get(base + path).status_code == 401
