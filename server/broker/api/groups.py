"""``/groups/{group}/...`` at a broker: one partition's part of a consumer group with leased
delivery (issue 20). The manager's router, or a client's direct path, sends each request
to the partition's leader with the group's settings (the managers' registry holds them).

Counted per topic for ``/metrics``: messages leased (``received_messages``) and settled by
action (``settled_messages``)."""

from __future__ import annotations

from broker.partition.group_leases import GroupSettings, Receipt
from broker.service import BrokerService
from protocol.access import Action, require_topic
from protocol.group_requests import (
    SETTLE_ACTIONS,
    BrokerReceive,
    DeadLettersQuery,
    DeliveryReceipt,
    GroupRedrive,
    MarkDeadLettered,
    Ordering,
    Outcome,
    SettleRequest,
)
from protocol.limits import Limits
from protocol.requests import TopicRef
from protocol.types import PartitionId, StoredMessage
from runtime.http_api import App, Handler, json_response, request_deadline, request_params
from runtime.http_server import HttpRequest, HttpResponse
from runtime.metrics import Metrics


def add_group_routes(api: App, service: BrokerService, limits: Limits, metrics: Metrics) -> None:
    @api.get("/groups", Action.DESCRIBE)
    def group_figures(http: HttpRequest) -> HttpResponse:
        request = TopicRef.parse(request_params(http), limits)
        groups, partitions = service.group_figures(request.topic)
        return json_response({"groups": groups, "partitions": partitions})

    @api.get("/groups/{group}/messages", Action.CONSUME)
    def receive(http: HttpRequest) -> HttpResponse:
        request = BrokerReceive.parse(request_params(http), http.path_params["group"], limits)
        require_topic(http.principal, Action.CONSUME, request.topic)
        settings = GroupSettings(
            request.settings.visibility_timeout_ms,
            request.settings.max_deliveries,
            request.settings.ordering is Ordering.KEY,
        )
        leased = service.receive(
            request.topic,
            request.partition_id,
            request.group,
            settings,
            request.max_messages,
            request.request_id,
            request_deadline(http, limits),
            request.wait_ms / 1000,
        )
        metrics.inc("received_messages", len(leased), topic=request.topic)
        messages = [_leased_json(request.topic, request.partition_id, m, n) for m, n in leased]
        return json_response({"messages": messages})

    for action in SETTLE_ACTIONS:
        route = _settle_route(service, limits, metrics, action)
        api.post(f"/groups/{{group}}/{action}", Action.CONSUME)(route)

    @api.get("/dead-letters", Action.NODE)
    def dead_letters(http: HttpRequest) -> HttpResponse:
        query = DeadLettersQuery.parse(request_params(http), limits)
        found = service.dead_letters(query.max_messages)
        return json_response({"dead_letters": [letter.to_json() for letter in found]})

    @api.post("/groups/{group}/dead-lettered", Action.NODE)
    def dead_lettered(http: HttpRequest) -> HttpResponse:
        request = MarkDeadLettered.parse(request_params(http), http.path_params["group"], limits)
        service.mark_dead_lettered(
            request.topic,
            request.partition_id,
            request.group,
            request.offsets,
            request_deadline(http, limits),
        )
        metrics.inc("dead_lettered_messages", len(request.offsets), topic=request.topic)
        return json_response({"offsets": list(request.offsets)})

    @api.post("/groups/{group}/redrive", Action.NODE)
    def redrive(http: HttpRequest) -> HttpResponse:
        request = GroupRedrive.parse(request_params(http), http.path_params["group"], limits)
        done = service.redrive(
            request.topic,
            request.partition_id,
            request.group,
            request,
            request_deadline(http, limits),
        )
        metrics.inc("redriven_messages", done.redriven, topic=request.topic)
        return json_response({"redriven": done.redriven, "gone": done.gone})


def _settle_route(service: BrokerService, limits: Limits, metrics: Metrics, action: str) -> Handler:
    def settle(http: HttpRequest) -> HttpResponse:
        params = request_params(http)
        request = SettleRequest.parse(params, http.path_params["group"], action, limits)
        require_topic(http.principal, Action.CONSUME, request.topic)
        partition_id = request.of_partition(params, limits)
        outcomes = service.settle(
            request.topic,
            partition_id,
            request.group,
            action,
            [Receipt(r.offset, r.delivery_count) for r in request.receipts],
            request.duration_ms,
            request_deadline(http, limits),
        )
        done = sum(1 for outcome in outcomes if outcome is Outcome.DONE)
        metrics.inc("settled_messages", done, topic=request.topic, action=action)
        answers = [
            {"receipt": receipt.to_wire(), "outcome": outcome.value}
            for receipt, outcome in zip(request.receipts, outcomes, strict=True)
        ]
        return json_response({"outcomes": answers})

    return settle


def _leased_json(
    topic: str, partition_id: PartitionId, message: StoredMessage, delivery_count: int
) -> dict[str, object]:
    receipt = DeliveryReceipt(partition_id, message.offset, delivery_count)
    return {
        **message.to_json(topic, partition_id),
        "delivery_count": delivery_count,
        "receipt": receipt.to_wire(),
    }
