"""kcat (librdkafka, Debian's package) and the Java console consumer (Kafka 4.4's own jars) read the
topic through the listener, from offset 0 to its end, and print exactly what was produced."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.integration.kafka_listener.conftest import PRODUCED, TOPIC, ListenerStack, Rec
from tiered_kafka_dev.services._kafka import _java, kafka_classpath

pytestmark = pytest.mark.integration


def test_kcat_reads_partition_from_zero(tiered: ListenerStack) -> None:
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is not installed: run dev/install.sh"
    out = subprocess.run([kcat, "-C", "-b", tiered.listener, "-t", TOPIC, "-p", "0", "-o", "beginning", "-e", "-J", "-q"],
                         capture_output=True, timeout=120, check=True, text=True).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [m["offset"] for m in lines] == list(range(len(PRODUCED[0])))
    got = [Rec(None if m["key"] is None else m["key"].encode(), None if m["payload"] is None else m["payload"].encode(),
               tuple((m["headers"][i], m["headers"][i + 1].encode()) for i in range(0, len(m.get("headers") or []), 2)), m["ts"])
           for m in lines]
    assert got == PRODUCED[0]


def java_line(offset: int, r: Rec) -> str:
    headers = ",".join(f"{k}:{v.decode()}" for k, v in r.headers) or "NO_HEADERS"
    key = "null" if r.key is None else r.key.decode()
    value = "null" if r.value is None else r.value.decode()
    return f"CreateTime:{r.timestamp}\tOffset:{offset}\t{headers}\t{key}\t{value}"


def test_java_console_consumer_reads_partition_from_zero(tiered: ListenerStack) -> None:
    expected = PRODUCED[1]
    command = [_java(), "-Xmx256m", "-XX:+UseSerialGC", "-cp", kafka_classpath(), "org.apache.kafka.tools.consumer.ConsoleConsumer",
               "--bootstrap-server", tiered.listener, "--topic", TOPIC, "--partition", "1", "--offset", "earliest",
               "--max-messages", str(len(expected)), "--timeout-ms", "60000",
               "--formatter-property", "print.timestamp=true", "--formatter-property", "print.offset=true",
               "--formatter-property", "print.headers=true", "--formatter-property", "print.key=true"]
    done = subprocess.run(command, capture_output=True, timeout=180, text=True, env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines == [java_line(o, r) for o, r in enumerate(expected)]


def test_the_coverage_page_names_the_listener_and_its_kcat_command_reads_the_topic(tiered: ListenerStack) -> None:
    """The cluster's overview page (``/ui/``) says where Kafka clients read its history (issue 35); the
    command it prints, run as it reads, delivers every offset of the topic from 0."""
    import html
    import re
    import shlex

    import httpx

    page = httpx.get(f"{tiered.gateway_url}/ui/clusters/{tiered.stack.cluster}", timeout=30).text
    found = re.search(r'<p class="listener">.*?<code>([^<]+)</code>.*?<code>(kcat [^<]+)</code>', page)
    assert found is not None, page[:2000]
    assert found[1] == tiered.listener and "PLAINTEXT" in page
    command = shlex.split(html.unescape(found[2]))
    shown = command[command.index("-t") + 1]  # the page's first topic (other tests of the package add topics)
    assert f'data-topic="{shown}"' in page, shown
    command[command.index("-t") + 1] = TOPIC  # the same command for the topic whose records are known
    out = subprocess.run([*command, "-f", "%p %o\\n", "-q"], capture_output=True, timeout=120, check=True).stdout  # values may be binary
    offsets = sorted(tuple(map(int, line.split())) for line in out.decode().splitlines() if line.strip())
    assert offsets == [(p, o) for p in range(len(PRODUCED)) for o in range(len(PRODUCED[p]))]
