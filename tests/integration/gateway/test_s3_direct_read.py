"""``S3Objects.get_range`` on a real S3 (SeaweedFS): the direct presigned read the Kafka listener and
``/records`` use on an ``http://`` endpoint answers what boto3's ``get_object`` answers, and S3's
failures as the gateway's errors (``s3_objects`` module doc, "Segment bytes")."""

from __future__ import annotations

import os
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tiered_kafka.read_plan import ByteRange
from tiered_kafka_gateway.config import load_settings
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.s3_objects import S3Objects
from tiered_kafka_service.s3_direct import DirectS3
from tiered_kafka_service.support import S3Location

pytestmark = pytest.mark.integration


def test_the_direct_ranged_read_answers_as_get_object_and_names_a_missing_object(s3_server: Any, s3_bucket: str) -> None:
    location = S3Location(bucket=s3_bucket, endpoint_url=s3_server.endpoint_url, region=s3_server.region,
                          access_key_id=s3_server.access_key, secret_access_key=s3_server.secret_key)
    settings = load_settings(clusters={"c": {"redis_url": "redis://127.0.0.1:9", "s3": location.model_dump(mode="json") | {"secret_access_key": s3_server.secret_key}}})
    objects = S3Objects.connect(location, s3_bucket, settings)
    assert objects._direct is not None  # an http:// endpoint: the direct read
    data = os.urandom(3 << 20)
    boto3.client("s3", endpoint_url=s3_server.endpoint_url, aws_access_key_id=s3_server.access_key, aws_secret_access_key=s3_server.secret_key,
                 region_name=s3_server.region).put_object(Bucket=s3_bucket, Key="t/c/orders-0/00000000000000000000.log", Body=data)
    key = "t/c/orders-0/00000000000000000000.log"
    try:
        for start, end in [(0, 1), (0, len(data)), (12345, 2 << 20), (len(data) - 7, len(data))]:
            got = objects.get_range(key, ByteRange(start, end, 0, 0))
            assert bytes(got) == data[start:end] == objects.get(key, f"bytes={start}-{end - 1}")
        assert objects.gets == 8 and objects.gets_by_kind["log"] == 8 and objects.presigns == 0  # its own URLs are not handed out
        with pytest.raises(GatewayError) as missing:
            objects.get_range("t/c/orders-0/00000000000000000100.log", ByteRange(0, 10, 0, 0))
        assert missing.value.error is ErrorCode.CORRUPT_REMOTE_DATA and "is missing" in str(missing.value)
        with pytest.raises(GatewayError) as beyond:  # a range past the object's end: 416, not a short answer taken as data
            objects.get_range(key, ByteRange(len(data) + 10, len(data) + 20, 0, 0))
        assert beyond.value.error is ErrorCode.STORAGE_UNAVAILABLE and "(416)" in str(beyond.value), str(beyond.value)
        # the agent's HEAD on the same direct path (tiered_kafka_service.s3_direct): head_object's answers, ClientError included
        direct = DirectS3.of(objects.client, s3_bucket, 30)
        assert direct is not None
        size, metadata = direct.head(key)
        assert size == len(data) and metadata == {}
        with pytest.raises(ClientError) as gone:
            direct.head("t/c/orders-0/00000000000000000100.log")
        assert gone.value.response["Error"]["Code"] == "404"
        direct.close()
    finally:
        objects.close()
