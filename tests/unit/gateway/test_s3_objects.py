"""``s3_objects.S3Objects`` over a fake boto3 client: counted GETs, S3's failures as the gateway's
answers, a ranged GET answered with another range refused, presigned URLs signing the Range."""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.exceptions import EndpointConnectionError

from tests.unit.gateway.fakes import FakeS3
from tiered_kafka.read_plan import ByteRange
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.s3_objects import S3Objects


def objects(client: Any) -> S3Objects:
    return S3Objects(client, "b", "http://s3.test:8333", "us-east-1")


def test_gets_are_counted_by_kind_and_a_missing_object_is_corrupt_remote_data() -> None:
    s3 = objects(FakeS3({"p/t-0/0.log": b"0123456789", "p/t-0/0.index": b""}))
    assert s3.get("p/t-0/0.log", "bytes=2-4") == b"234" and s3.get("p/t-0/0.index") == b""
    assert (s3.gets, dict(s3.gets_by_kind)) == (2, {"log": 1, "index": 1})
    with pytest.raises(GatewayError, match=r"s3://b/p/t-0/1.log is missing") as missing:
        s3.get("p/t-0/1.log")
    assert missing.value.error is ErrorCode.CORRUPT_REMOTE_DATA


def test_an_ignored_range_and_an_unreachable_s3_are_answered_as_such() -> None:
    class IgnoresRange(FakeS3):
        def get_object(self, **params: Any) -> dict[str, Any]:
            return {"Body": io.BytesIO(self.objects[params["Key"]]), "ResponseMetadata": {"HTTPStatusCode": 200}}

    with pytest.raises(GatewayError, match="HTTP 200 and Content-Range absent: the range was not honoured") as ignored:
        objects(IgnoresRange({"k.log": b"0123"})).get("k.log", "bytes=0-1")
    assert ignored.value.error is ErrorCode.CORRUPT_REMOTE_DATA

    class Down(FakeS3):
        def get_object(self, **params: Any) -> dict[str, Any]:
            raise EndpointConnectionError(endpoint_url="http://s3.test:8333")

        def head_bucket(self, **params: Any) -> dict[str, Any]:
            raise EndpointConnectionError(endpoint_url="http://s3.test:8333")

    with pytest.raises(GatewayError) as down:
        objects(Down({})).get("k.log")
    assert down.value.error is ErrorCode.STORAGE_UNAVAILABLE
    shown = objects(Down({})).check()  # issue 29: the endpoint is logged, not shown
    assert shown.startswith("unavailable (error id ") and "s3.test" not in shown and objects(FakeS3({})).check() == "ok"


def test_a_presigned_url_signs_its_range_and_expiry() -> None:
    s3 = objects(FakeS3({}))
    url = s3.presign("p/t 0/0.log", ByteRange(10, 20, 5, 6), 60)
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    assert parts.netloc == "s3.test:8333" and parts.path == "/b/p/t%200/0.log"
    assert query["X-Amz-Expires"] == ["60"] and "range" in query["X-Amz-SignedHeaders"][0].split(";")
    assert s3.presigns == 1
