"""Flask glue shared by the servers: request parameters and error mapping.

Handlers parse with ``request_params()``, call a service, and return ``json_response``;
every ``RaftQError`` becomes ``{"error_code", "message"}`` with its status here, once.
"""

from __future__ import annotations

import logging
import time

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from protocol.deadline import HEADER as DEADLINE_HEADER
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits

_log = logging.getLogger(__name__)


def request_params() -> dict[str, object]:
    """The query string merged over the JSON body (the seed's clients send GET bodies)."""
    params: dict[str, object] = {}
    if request.content_length:
        try:
            body = orjson.loads(request.get_data(cache=False))
        except orjson.JSONDecodeError:
            raise RaftQError(ErrorCode.MALFORMED_REQUEST, "the body is not valid JSON") from None
        if not isinstance(body, dict):
            raise RaftQError(ErrorCode.MALFORMED_REQUEST, "the body must be a JSON object")
        params.update(body)
    for name, value in request.args.items():
        params[name] = value
    return params


def request_deadline(limits: Limits) -> Deadline:
    """The deadline of the request being handled: its caller's budget from the header, never
    later than ``http_timeout_s`` (this node's own bound on a request)."""
    return Deadline.from_header(
        request.headers.get(DEADLINE_HEADER), time.monotonic(), limits.http_timeout_s
    )


def json_response(body: object, status: int = 200) -> Response:
    # orjson: a pop or fetch answer holds up to fetch_messages_max messages.
    return Response(
        orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS),
        status=status,
        mimetype="application/json",
    )


def error_response(error: RaftQError, limits: Limits) -> Response:
    response = json_response(error.to_json(), error.status)
    if error.status in (429, 503):
        response.headers["Retry-After"] = str(limits.retry_after_s)
    return response


def install_error_handlers(app: Flask, limits: Limits) -> None:
    app.config["MAX_CONTENT_LENGTH"] = limits.request_bytes_max

    @app.errorhandler(RaftQError)
    def _raftq_error(error: RaftQError) -> Response:
        return error_response(error, limits)

    @app.errorhandler(HTTPException)
    def _http_error(error: HTTPException) -> Response:
        status = error.code or 500
        code = {
            404: ErrorCode.NOT_FOUND,
            405: ErrorCode.METHOD_NOT_ALLOWED,
            413: ErrorCode.TOO_LARGE,
        }.get(status, ErrorCode.MALFORMED_REQUEST if status < 500 else ErrorCode.INTERNAL)
        return error_response(RaftQError(code, error.description or error.name), limits)

    @app.errorhandler(Exception)
    def _unexpected(error: Exception) -> Response:
        _log.exception("unhandled error")
        return error_response(RaftQError(ErrorCode.INTERNAL, f"internal error: {error}"), limits)
