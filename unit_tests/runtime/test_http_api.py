"""``App``'s routing: exact paths, ``{name}`` segments, what wins, and the route label that
metrics see (the pattern, never the path: a bounded label)."""

from __future__ import annotations

import orjson
import pytest

from protocol.access import Action
from protocol.errors import ErrorCode
from protocol.limits import Limits
from runtime.http_api import App, json_response
from runtime.http_server import HttpRequest, HttpResponse


def _app(seen: list[str | None]) -> App:
    app = App("test", Limits())

    @app.post("/groups/{group}/ack", Action.OPEN)
    def ack(http: HttpRequest) -> HttpResponse:
        return json_response({"ack": http.path_params})

    @app.get("/groups/{group}/messages", Action.OPEN)
    def messages(http: HttpRequest) -> HttpResponse:
        return json_response({"messages": http.path_params})

    @app.get("/groups/all/messages", Action.OPEN)
    def exact(http: HttpRequest) -> HttpResponse:
        return json_response({"exact": http.path_params})

    app.after_request(lambda _request, _response, route: seen.append(route))
    return app


def _call(app: App, method: str, target: str) -> tuple[int, object]:
    response = app.handle(HttpRequest(method, target, []))
    return response.status, orjson.loads(response.body)


def test_a_segment_parameter_is_read_and_the_pattern_is_the_route_label() -> None:
    seen: list[str | None] = []
    app = _app(seen)
    assert _call(app, "POST", "/groups/workers/ack?topic=t") == (200, {"ack": {"group": "workers"}})
    assert _call(app, "GET", "/groups/w%2Dx/messages") == (200, {"messages": {"group": "w-x"}})
    assert seen == ["/groups/{group}/ack", "/groups/{group}/messages"]


def test_an_exact_route_wins_over_a_pattern() -> None:
    app = _app([])
    assert _call(app, "GET", "/groups/all/messages") == (200, {"exact": {}})


@pytest.mark.parametrize(
    ("method", "target", "status", "code"),
    [
        ("GET", "/groups//messages", 404, ErrorCode.NOT_FOUND),  # an empty segment
        ("GET", "/groups/a/b/messages", 404, ErrorCode.NOT_FOUND),
        ("GET", "/groups/a/nothing", 404, ErrorCode.NOT_FOUND),
        ("GET", "/groups/a/ack", 405, ErrorCode.METHOD_NOT_ALLOWED),
        ("DELETE", "/groups/a/messages", 405, ErrorCode.METHOD_NOT_ALLOWED),
    ],
)
def test_no_route_is_404_and_another_method_405_with_no_route_label(
    method: str, target: str, status: int, code: ErrorCode
) -> None:
    seen: list[str | None] = []
    got_status, body = _call(_app(seen), method, target)
    assert got_status == status
    assert isinstance(body, dict) and body["error_code"] == code.value
    assert seen == [None]
