"""``errors``: the one table from exception classes to answers (``ANSWERS``) and its one handler.

A small app with the gateway's handlers and middleware raises each kind of exception from a route;
no server is involved (Starlette's TestClient calls the ASGI app in process)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.support.local_url import LOCAL_URL
from tiered_kafka.errors import (
    ConfigError,
    CorruptIndexError,
    CorruptRecordError,
    GatewayRequestError,
    OffsetOutOfRangeError,
    RsmDecryptionError,
    RsmFormatError,
    TieredKafkaError,
    UnsupportedCodecError,
)
from tiered_kafka.format.batch_index import UnsupportedFormatError
from tiered_kafka.registry import MalformedRegistryDataError, RegistryError, RegistryUnavailableError, RegistryValueError
from tiered_kafka_gateway.errors import ANSWERS, ErrorCode, GatewayError, GuardUnexpected, about, code_of, install_handlers


def answers(raise_it: Callable[[], None]) -> tuple[int, dict[str, object]]:
    app = FastAPI()
    install_handlers(app)

    @app.get("/v1/clusters/{cluster}/x")
    def route(cluster: str) -> None:
        raise_it()

    app.add_middleware(GuardUnexpected)
    with TestClient(app, raise_server_exceptions=False, base_url=LOCAL_URL) as client:
        response = client.get("/v1/clusters/c1/x")
    return response.status_code, response.json()["error"]


def test_corrupt_registry_data_is_a_500_naming_its_cause_that_clients_do_not_retry(caplog: pytest.LogCaptureFixture) -> None:
    def corrupt() -> None:
        raise MalformedRegistryDataError("not an int", key="tk:c1:t:0:seg", field="size")

    status, error = answers(corrupt)
    assert (status, error["code"]) == (500, "corrupt_registry_data")
    assert str(error["message"]).startswith("the registry of cluster c1 holds malformed data: ") and "'tk:c1:t:0:seg'" in str(error["message"])
    assert not GatewayRequestError(str(error["message"]), status=status, code=str(error["code"])).retriable  # the SDK asks once
    assert any(r.levelno == logging.ERROR and "corrupt_registry_data" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (RegistryUnavailableError("connection refused"), 503, "registry_unavailable"),
        (RegistryError("WRONGTYPE"), 500, "registry_error"),
        (RegistryValueError("bad topic"), 500, "registry_error"),
        (RsmDecryptionError("tag mismatch"), 502, "rsm_decryption_failed"),
        (RsmFormatError("bad manifest"), 502, "corrupt_remote_data"),
        (CorruptIndexError("bad .index"), 502, "corrupt_remote_data"),
        (CorruptRecordError("bad crc", position=7), 502, "corrupt_remote_data"),
        (UnsupportedCodecError("codec 7"), 422, "unsupported_segment_format"),
        (UnsupportedFormatError("magic 1"), 422, "unsupported_segment_format"),
        (OffsetOutOfRangeError("offset 9 is not in the segment"), 502, "corrupt_remote_data"),
        (GatewayError(ErrorCode.KAFKA_UNAVAILABLE, "Kafka is down"), 503, "kafka_unavailable"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_each_class_is_answered_by_the_table(exc: TieredKafkaError, status: int, code: str) -> None:
    def fail() -> None:
        raise exc

    assert answers(fail)[0:1] == (status,) and answers(fail)[1]["code"] == code
    assert code_of(exc) is not None and code_of(exc).code == code  # type: ignore[union-attr]


def test_about_names_the_object_and_a_class_outside_the_table_is_an_internal_error() -> None:
    def corrupt() -> None:
        with about("p/c1/t-0/00000000000000000000.log"), about("inner wins"):
            raise CorruptRecordError("bad crc", position=7)

    assert str(answers(corrupt)[1]["message"]).startswith("inner wins: bad crc")

    def bug() -> None:
        raise ConfigError("a config error escaping to a route is a bug")

    status, error = answers(bug)
    assert (status, error["code"]) == (500, "internal_error") and "config" not in str(error["message"])
    assert ConfigError not in ANSWERS and code_of(ConfigError("x")) is None
