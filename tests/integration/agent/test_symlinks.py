"""The agent refuses symbolic links in log.dir (issue 29; ``local_segments`` module doc): a real agent on a
temporary log.dir (fixture segments, real Redis and SeaweedFS) where one partition directory and one
segment file are links to copies elsewhere."""

from __future__ import annotations

import logging
import shutil

import boto3
import pytest

from tests.support.agent_env import agent_settings, checkpoint_high_watermarks, only_topics, registry_for, wait_for
from tests.support.fixtures import FIXTURES
from tiered_kafka_agent.agent import Agent

pytestmark = pytest.mark.integration

LINKED_LOG = "00000000000000000644.log"


def test_symlinked_partition_dirs_and_segment_files_are_refused(redis_server, s3_server, s3_bucket, tmp_path, caplog) -> None:
    log_dir, outside = tmp_path / "logs", tmp_path / "outside"
    log_dir.mkdir()
    shutil.copytree(FIXTURES / "test_topic_a-0", log_dir / "plain-0")
    shutil.copytree(FIXTURES / "test_topic_a-1", outside / "linked-0")
    (log_dir / "linked-0").symlink_to(outside / "linked-0", target_is_directory=True)
    shutil.move(log_dir / "plain-0" / LINKED_LOG, outside / LINKED_LOG)  # the very same bytes, behind a link
    (log_dir / "plain-0" / LINKED_LOG).symlink_to(outside / LINKED_LOG)
    checkpoint_high_watermarks(log_dir)
    settings = agent_settings(log_dir, redis_server, s3_server, s3_bucket, topics=only_topics("plain", "linked"))
    registry = registry_for(settings)
    with caplog.at_level(logging.WARNING), Agent(settings) as agent:
        wait_for(lambda: [s.base_offset for s in registry.segments("plain", 0)] == [0, 362], what="the segments before the link uploaded")
        wait_for(lambda: agent.metrics.value("tiered_kafka_agent_upload_failures_total", topic="plain") >= 2, what="the linked segment refused twice")
        assert agent.metrics.value("tiered_kafka_agent_symlinks_refused_total", kind="segment_file") >= 2
        assert agent.metrics.value("tiered_kafka_agent_symlinks_refused_total", kind="partition_dir") >= 1
        assert [s.base_offset for s in registry.segments("plain", 0)] == [0, 362]  # waits at the link: neither read nor a gap
        assert registry.gaps("plain", 0) == []
    assert registry.partition_info("linked", 0) is None
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint_url, aws_access_key_id=s3_server.access_key,
                      aws_secret_access_key=s3_server.secret_key, region_name=s3_server.region)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=s3_bucket) for o in page.get("Contents", ())]
    assert keys and not any("linked-0" in k or k.endswith(LINKED_LOG) for k in keys), keys
    assert f"refusing partition dir {log_dir / 'linked-0'}" in caplog.text and f"refusing segment file {log_dir / 'plain-0' / LINKED_LOG}" in caplog.text
    assert caplog.text.count(f"refusing segment file {log_dir / 'plain-0' / LINKED_LOG}") == 1  # once per path
