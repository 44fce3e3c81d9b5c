"""``App``: the routes of one node's HTTP API, and what every handler shares.

Handlers take the ``HttpRequest``, parse with ``request_params(request)`` (the query string
over the JSON body), call a service and return ``json_response(...)``. Every ``RaftQError``
becomes ``{"error_code", "message"}`` with its status here, once (Retry-After on 429 and
503); any other exception is logged and answered 500. Served by ``runtime.http_server``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import orjson

from protocol.access import Action, Principal, require
from protocol.deadline import EPOCH_HEADER as EPOCH_DEADLINE_HEADER
from protocol.deadline import HEADER as DEADLINE_HEADER
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import QueryText
from runtime.http_server import HttpRequest, HttpResponse, ServerLimits
from runtime.metrics import Metrics

_log = logging.getLogger(__name__)

Handler = Callable[[HttpRequest], HttpResponse]
Authenticator = Callable[[HttpRequest], Principal | None]
_JSON = (("Content-Type", "application/json"),)
_TEXT = (("Content-Type", "text/plain; version=0.0.4"),)
E = TypeVar("E", bound=Exception)


def request_params(request: HttpRequest) -> dict[str, object]:
    """The query string merged over the JSON body (the seed's clients send GET bodies)."""
    params: dict[str, object] = {}
    if request.body:
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            raise RaftQError(ErrorCode.MALFORMED_REQUEST, "the body is not valid JSON") from None
        if not isinstance(body, dict):
            raise RaftQError(ErrorCode.MALFORMED_REQUEST, "the body must be a JSON object")
        params.update(body)
    if request.query_string:
        params.update((name, QueryText(value)) for name, value in request.args().items())
    return params


def request_deadline(request: HttpRequest, limits: Limits) -> Deadline:
    """The deadline of ``request``: its caller's budget from the headers (the earlier of the
    relative and the absolute one), never later than ``http_timeout_s`` (this node's own
    bound on a request)."""
    return Deadline.from_headers(
        request.header(DEADLINE_HEADER),
        request.header(EPOCH_DEADLINE_HEADER),
        time.monotonic(),
        int(time.time() * 1000),
        limits.http_timeout_s,
        limits.deadline_clock_skew_s_max,
    )


def json_response(body: object, status: int = 200) -> HttpResponse:
    # orjson: a pop or fetch answer holds up to fetch_messages_max messages.
    return HttpResponse(status, orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS), _JSON)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
"""Methods counted under their own name; any other a caller sends counts as ``other``."""


def count_requests(app: App, metrics: Metrics) -> None:
    """Every answer counted by method, route and status, and its handling time observed per
    route (``route``: the matched path, or ``other``: forwarded or unknown). Every label is
    bounded whatever callers send: a made-up method or path adds no series (each one is
    kept, and rendered at every scrape, for the life of the process)."""

    def count(request: HttpRequest, response: HttpResponse, route: str | None) -> None:
        label = route or "other"
        method = request.method if request.method in _METHODS else "other"
        metrics.inc("http_requests", method=method, route=label, status=str(response.status))
        metrics.observe("http_request_seconds", time.monotonic() - request.received_s, route=label)

    app.after_request(count)


def text_response(text: str) -> HttpResponse:
    """Prometheus' text format."""
    return HttpResponse(200, text.encode("utf-8"), _TEXT)


def error_response(error: RaftQError, limits: Limits) -> HttpResponse:
    response = json_response(error.to_json(), error.status)
    if error.status in (429, 503):
        return HttpResponse(
            response.status,
            response.body,
            (*response.headers, ("Retry-After", str(limits.retry_after_s))),
        )
    if error.status == 401:  # RFC 9110 section 11.6.1: a 401 names the scheme to use
        return HttpResponse(
            response.status, response.body, (*response.headers, ("WWW-Authenticate", "Bearer"))
        )
    return response


def add_document_route(app: App, document: Mapping[str, object]) -> None:
    """``GET /openapi.json``: the node's API document (``protocol.openapi``), encoded once."""
    body = orjson.dumps(document)

    @app.get("/openapi.json", Action.OPEN)
    def api_document(_http: HttpRequest) -> HttpResponse:
        return HttpResponse(200, body, _JSON)


def server_limits(limits: Limits) -> ServerLimits:
    return ServerLimits(
        connections_max=limits.http_connections_max,
        header_bytes_max=limits.http_header_bytes_max,
        body_bytes_max=limits.request_bytes_max,
        request_read_timeout_s=limits.http_request_read_timeout_s,
        keepalive_idle_s=limits.http_keepalive_idle_s,
        shutdown_grace_s=limits.http_shutdown_grace_s,
        stream_send_timeout_s=limits.stream_send_timeout_s,
    )


_PARAM = re.compile(r"^\{([a-z_]+)\}$")


def _segments(path: str) -> tuple[str, ...]:
    return tuple(path.strip("/").split("/"))


def _match(pattern: tuple[str, ...], path: tuple[str, ...]) -> dict[str, str] | None:
    """The ``{name}`` segments of ``path`` when it has ``pattern``'s shape (a parameter
    matches one non-empty segment), else None."""
    if len(pattern) != len(path):
        return None
    params: dict[str, str] = {}
    for expected, found in zip(pattern, path, strict=True):
        name = _PARAM.match(expected)
        if name is not None and found:
            params[name.group(1)] = found
        elif expected != found:
            return None
    return params


class App:
    """Routes by path and method, hooks around them, and the error mapping. A route's path
    is exact, or has ``{name}`` segments (``/groups/{group}/ack``) that the handler reads
    from ``request.path_params``; an exact route wins over a pattern.

    Not thread-safe to build; once built (before serving), ``handle`` is called from every
    connection thread at once.
    """

    def __init__(
        self, name: str, limits: Limits, authenticate: Authenticator | None = None
    ) -> None:
        """``authenticate`` says who sent a request (``None``: nobody), or raises 401 for
        credentials nobody issued; without it every caller is nobody (the load balancer's
        own routes are all open)."""
        self.name = name
        self._limits = limits
        self._authenticate = authenticate
        self._routes: dict[tuple[str, str], Handler] = {}
        self._actions: dict[tuple[str, str], Action] = {}
        self._paths: set[str] = set()
        self._patterns: list[tuple[tuple[str, ...], str]] = []
        """The routes with ``{name}`` segments, as (segments, path), in the order added."""
        self._fallback: Handler | None = None
        self._before: list[Callable[[HttpRequest], None]] = []
        self._after: list[Callable[[HttpRequest, HttpResponse, str | None], None]] = []
        self._errors: list[tuple[type[Exception], Callable[[Exception], HttpResponse]]] = []
        self._closers: list[Callable[[], None]] = []

    def route(self, method: str, path: str, action: Action) -> Callable[[Handler], Handler]:
        """Every route says what it does (``protocol.access.Action``): the caller's role is
        checked against it before the handler runs; the handler checks the topic."""

        def add(handler: Handler) -> Handler:
            self._routes[(method, path)] = handler
            self._actions[(method, path)] = action
            if "{" in path and path not in self._paths:
                self._patterns.append((_segments(path), path))
            self._paths.add(path)
            return handler

        return add

    def get(self, path: str, action: Action) -> Callable[[Handler], Handler]:
        return self.route("GET", path, action)

    def post(self, path: str, action: Action) -> Callable[[Handler], Handler]:
        return self.route("POST", path, action)

    def action(self, method: str, path: str) -> Action:
        """What a route declared it does (``KeyError`` for no such route)."""
        return self._actions[(method, path)]

    def routes(self) -> list[tuple[str, str]]:
        """Every ``(method, path)`` routed here (the API document's test compares them)."""
        return sorted(self._routes)

    def fallback(self, handler: Handler) -> Handler:
        """Answers every request no route takes (the load balancer forwards them)."""
        self._fallback = handler
        return handler

    def before_request(self, hook: Callable[[HttpRequest], None]) -> None:
        """Runs before the access check and the handler of a routed request; may raise to
        answer instead (it must not reveal anything: the caller is not known yet)."""
        self._before.append(hook)

    def after_request(self, hook: Callable[[HttpRequest, HttpResponse, str | None], None]) -> None:
        """Sees every answer, with the matched route's path (None when none matched)."""
        self._after.append(hook)

    def error_handler(self, kind: type[E], answer: Callable[[E], HttpResponse]) -> None:
        self._errors.append((kind, answer))  # type: ignore[arg-type]

    def on_close(self, closer: Callable[[], None]) -> None:
        self._closers.append(closer)

    def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception:  # the others must still close
                _log.exception("closing %s", self.name)

    def handle(self, request: HttpRequest) -> HttpResponse:
        # HEAD is not routed to GET handlers: a GET /logs with a consumer_id is a pop, and a
        # HEAD would claim messages whose answer nobody reads.
        route = self._route_of(request)
        handler = None if route is None else self._routes.get((request.method, route))
        label = route if handler is not None else None
        try:
            if handler is None or route is None:
                handler = self._unrouted(request, route)
            else:
                # Hooks first: a manager that does not lead refuses with NOT_LEADER (retry
                # elsewhere) before its possibly older registry could call a new key unknown.
                for hook in self._before:
                    hook(request)
                self._check_access(request, self._actions[(request.method, route)])
            response = handler(request)
        except Exception as exc:
            response = self._error_answer(exc)
        for after in self._after:
            after(request, response, label)
        return response

    def _route_of(self, request: HttpRequest) -> str | None:
        """The routed path ``request`` takes (an exact one first), its ``{name}`` segments
        set on it; None when no route has its path."""
        if request.path in self._paths:
            return request.path
        segments = _segments(request.path)
        for pattern, path in self._patterns:
            params = _match(pattern, segments)
            if params is not None:
                request.path_params = params
                return path
        return None

    def _check_access(self, request: HttpRequest, action: Action) -> None:
        # Also for an open route: it may show a node more (``/raft_status``), and wrong
        # credentials are refused wherever they are sent.
        if self._authenticate is not None:
            request.principal = self._authenticate(request)
        require(request.principal, action)

    def _unrouted(self, request: HttpRequest, route: str | None) -> Handler:
        if self._fallback is not None:
            return self._fallback
        if route is not None:
            raise RaftQError(
                ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {request.path}"
            )
        raise RaftQError(ErrorCode.NOT_FOUND, f"no such resource: {request.path}")

    def _error_answer(self, exc: Exception) -> HttpResponse:
        for kind, answer in self._errors:
            if isinstance(exc, kind):
                return answer(exc)
        if isinstance(exc, RaftQError):
            return error_response(exc, self._limits)
        _log.exception("unhandled error in %s", self.name)
        return error_response(
            RaftQError(ErrorCode.INTERNAL, f"internal error: {exc}"), self._limits
        )
