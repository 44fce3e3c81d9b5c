"""``/groups``: consumer groups with leased delivery (issue 20), defined by admins (a
group's dead-letter topic is written with the cluster's rights) and listed by any key; and
``/groups/{group}/...``: receive, ack, nack and extend, by a consumer key of the topic,
routed to the partitions' brokers (``LogRouter``); and redrive, by admins (it changes what
every member of the group gets: ``Redriver``)."""

from __future__ import annotations

from manager.log_router import LogRouter
from manager.redrive import Redriver
from manager.services import GroupService
from protocol.access import Action, require_topic
from protocol.group_requests import (
    SETTLE_ACTIONS,
    CreateGroup,
    GroupReceive,
    ListGroups,
    RedriveRequest,
    SettleRequest,
)
from protocol.limits import Limits
from runtime.http_api import App, Handler, json_response, request_deadline, request_params
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(
    api: App, service: GroupService, router: LogRouter, redriver: Redriver, limits: Limits
) -> None:
    @api.post("/groups", Action.ADMIN)
    def create_group(http: HttpRequest) -> HttpResponse:
        body, created = service.create_group(CreateGroup.parse(request_params(http), limits))
        return json_response(body, 201 if created else 200)

    @api.get("/groups", Action.DESCRIBE)
    def list_groups(http: HttpRequest) -> HttpResponse:
        request = ListGroups.parse(request_params(http), limits)
        return json_response(service.groups(request.topic))

    @api.get("/groups/{group}/messages", Action.CONSUME)
    def receive(http: HttpRequest) -> HttpResponse:
        request = GroupReceive.parse(request_params(http), http.path_params["group"], limits)
        require_topic(http.principal, Action.CONSUME, request.topic)
        return json_response(router.receive(request, request_deadline(http, limits)))

    for action in SETTLE_ACTIONS:
        api.post(f"/groups/{{group}}/{action}", Action.CONSUME)(_settle(router, limits, action))

    @api.post("/groups/{group}/redrive", Action.ADMIN)
    def redrive(http: HttpRequest) -> HttpResponse:
        request = RedriveRequest.parse(request_params(http), http.path_params["group"], limits)
        return json_response(redriver.redrive(request, request_deadline(http, limits)))


def _settle(router: LogRouter, limits: Limits, action: str) -> Handler:
    def settle(http: HttpRequest) -> HttpResponse:
        params = request_params(http)
        request = SettleRequest.parse(params, http.path_params["group"], action, limits)
        require_topic(http.principal, Action.CONSUME, request.topic)
        return json_response(router.settle(request, request_deadline(http, limits)))

    return settle
