"""Errors of the gateway and their JSON form: ``{"error": {"code": ..., "message": ...}}``.

Domain errors are raised as ``GatewayError`` anywhere and turned into responses by one handler
(``install_handlers``); FastAPI's own validation errors become 422 with the same shape. An
unexpected exception is logged and answered 500 with no internals. Topics a caller may not read
are answered as if they did not exist (404), so that access control reveals nothing.
"""

from __future__ import annotations

import enum
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

log = logging.getLogger(__name__)


@enum.unique
class ErrorCode(enum.Enum):
    """(HTTP status, stable code) of every error the gateway returns."""

    INVALID_REQUEST = (422, "invalid_request")
    UNAUTHORIZED = (401, "unauthorized")
    UNKNOWN_CLUSTER = (404, "unknown_cluster")
    UNKNOWN_TOPIC_OR_PARTITION = (404, "unknown_topic_or_partition")
    OFFSET_OUT_OF_RANGE = (416, "offset_out_of_range")
    OFFSET_NOT_REMOTE = (416, "offset_not_in_remote_storage")
    UNSUPPORTED_FORMAT = (422, "unsupported_segment_format")
    CORRUPT_REMOTE_DATA = (502, "corrupt_remote_data")
    REGISTRY_UNAVAILABLE = (503, "registry_unavailable")
    STORAGE_UNAVAILABLE = (503, "storage_unavailable")
    KAFKA_UNAVAILABLE = (503, "kafka_unavailable")
    KAFKA_NOT_CONFIGURED = (409, "kafka_not_configured")

    @property
    def status(self) -> int:
        return self.value[0]

    @property
    def code(self) -> str:
        return self.value[1]


class GatewayError(Exception):
    def __init__(self, error: ErrorCode, message: str, **details: object) -> None:
        super().__init__(message)
        self.error = error
        self.message = message
        self.details = details


def error_body(error: ErrorCode, message: str, **details: object) -> dict[str, object]:
    return {"error": {"code": error.code, "message": message, **details}}


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.error is ErrorCode.UNAUTHORIZED else None
        return JSONResponse(error_body(exc.error, exc.message, **exc.details), status_code=exc.error.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [{"location": list(e.get("loc", ())), "problem": e.get("msg", "")} for e in exc.errors()]
        return JSONResponse(error_body(ErrorCode.INVALID_REQUEST, "malformed parameters", problems=problems), status_code=422)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(ErrorCode.STORAGE_UNAVAILABLE, "internal error; see the gateway log"), status_code=503)
