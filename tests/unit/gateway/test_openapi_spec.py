"""The checked-in openapi/openapi.json: up to date, stable operation ids, documented errors."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fastapi.routing import APIRoute

from tiered_kafka_gateway import openapi_spec
from tiered_kafka_gateway.app import create_app

ERROR_SCHEMA = "#/components/schemas/ErrorResponse"
# Probes with no parameters and no failure of their own to describe (liveness, Prometheus text).
NO_ERROR_RESPONSES = {"health", "metrics"}
# Every /v1 operation can meet these whatever its parameters: a missing token, an unknown
# cluster/topic, malformed parameters, a bug (500 internal_error), an unreachable registry or S3.
V1_ERRORS = {"401", "404", "422", "500", "503"}
# ...and every operation on one topic a token that may not read it (403 topic_authorization_failed).
TOPIC_ERRORS = {"403"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return openapi_spec.openapi_document()


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, op) for path, ops in document["paths"].items() for method, op in ops.items()]


def test_checked_in_file_is_up_to_date(document: dict[str, Any]) -> None:
    assert openapi_spec.SPEC_PATH.exists(), "openapi/openapi.json is missing; run make openapi"
    checked_in = openapi_spec.SPEC_PATH.read_text()
    assert checked_in == openapi_spec.render(document), "openapi/openapi.json is stale; run make openapi"


def test_check_mode_fails_on_a_stale_or_missing_file_and_writes_a_fresh_one(tmp_path, capsys) -> None:
    target = tmp_path / "openapi.json"
    assert openapi_spec.main(["--check", "--output", str(target)]) == 1
    assert "is missing; run make openapi" in capsys.readouterr().err
    assert openapi_spec.main(["--output", str(target)]) == 0
    text = target.read_text()
    assert text.endswith("}\n") and json.loads(text) and text == openapi_spec.render(json.loads(text))
    assert openapi_spec.main(["--check", "--output", str(target)]) == 0
    target.write_text(text.replace('"tiered-kafka gateway"', '"something else"'))
    assert openapi_spec.main(["--check", "--output", str(target)]) == 1
    assert "is stale; run make openapi" in capsys.readouterr().err


def test_generation_ignores_the_environment(monkeypatch, document: dict[str, Any]) -> None:
    monkeypatch.setenv("TIERED_KAFKA_GATEWAY_PRESIGN_TTL_S", "not a number")  # would fail validation if read
    assert openapi_spec.openapi_document() == document


def test_every_operation_has_an_explicit_stable_operation_id(document: dict[str, Any]) -> None:
    app = create_app(openapi_spec.placeholder_settings())
    routes = [r for r in app.routes if isinstance(r, APIRoute) and r.include_in_schema]
    implicit = sorted(r.path for r in routes if not r.operation_id)
    assert not implicit, f"routes without an explicit operation_id= (their id would follow the Python function name): {implicit}"
    ids = [op.get("operationId") for _, _, op in operations(document)]
    assert all(isinstance(i, str) and re.fullmatch(r"[a-z][A-Za-z0-9]*", i) for i in ids), ids
    assert len(ids) == len(set(ids)), f"duplicate operationIds: {ids}"


def test_every_operation_documents_its_error_responses(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert {"code", "message"} <= set(schemas["ErrorDetail"]["properties"])
    for method, path, op in operations(document):
        where = f"{method.upper()} {path} ({op['operationId']})"
        responses = op["responses"]
        assert any(s.startswith("2") for s in responses), where
        errors = {s: r for s, r in responses.items() if s[0] in "45"}
        if op["operationId"] in NO_ERROR_RESPONSES:
            assert not op.get("parameters"), f"{where} takes parameters, so it can fail: document its errors"
            continue
        assert errors, f"{where} documents no error response"
        if path.startswith("/v1/"):
            assert V1_ERRORS <= set(errors), f"{where} lacks {sorted(V1_ERRORS - set(errors))}"
            wanted = TOPIC_ERRORS if "{topic}" in path else set()
            assert (TOPIC_ERRORS & set(errors)) == wanted, f"{where}: 403 documented {'without' if not wanted else 'missing'} a topic in the path"
        if op.get("parameters"):
            assert "422" in errors, f"{where} has parameters but does not document 422"
        for status, response in errors.items():
            schema = response.get("content", {}).get("application/json", {}).get("schema", {})
            assert schema.get("$ref"), f"{where} {status} has no JSON body schema"
            if path.startswith("/v1/"):
                assert schema["$ref"] == ERROR_SCHEMA, f"{where} {status} is not an ErrorResponse: {schema}"
    # FastAPI's default 422 body ({"detail": [...]}) is not what the gateway sends.
    assert "HTTPValidationError" not in schemas
