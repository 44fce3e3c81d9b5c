"""``/logs``: produce (POST), pop by consumer and fetch by offset (GET).

Counted per topic for ``/metrics`` (their rates are the produce and consume rates): messages
acknowledged to producers (a retried batch answered from memory counts again), popped and
fetched."""

from __future__ import annotations

from broker.access import ClientVerifier
from broker.service import BrokerService, LongPoll
from protocol import streams
from protocol.access import Action, Node, require_topic
from protocol.limits import Limits
from protocol.requests import Fetch, Pop, Produce, partition_ref
from protocol.types import PartitionId, StoredMessage
from runtime.http_api import App, json_response, request_deadline, request_params
from runtime.http_server import HttpRequest, HttpResponse
from runtime.metrics import Metrics


def add_log_routes(
    api: App,
    service: BrokerService,
    limits: Limits,
    metrics: Metrics,
    clients: ClientVerifier | None = None,
) -> None:
    """``clients``: checks that a client's producer or consumer id is registered to its key
    (issue 23); ``None`` (tests of the routes alone) trusts every id."""

    @api.post("/logs", Action.PRODUCE)
    def produce(http: HttpRequest) -> HttpResponse:
        trusted = isinstance(http.principal, Node)  # a dead letter's copy, from a manager
        request, partition_id = Produce.parse_one_partition(
            request_params(http), limits, trusted=trusted
        )
        require_topic(http.principal, Action.PRODUCE, request.topic)
        if clients is not None and request.producer_id is not None:
            clients.check(http.principal, "producer", request.producer_id, request.topic)
        offsets, ack = service.produce(
            request.topic,
            partition_id,
            request.messages,
            request.producer_id,
            request.sequence,
            request_deadline(http, limits),
            request.durability,
        )
        body = {"partition_id": partition_id, "offsets": offsets, "ack": ack.to_json()}
        metrics.inc("produced_messages", len(request.messages), topic=request.topic)
        return json_response(body, 201)

    @api.get("/logs", Action.CONSUME)
    def read(http: HttpRequest) -> HttpResponse:
        params = request_params(http)
        topic, partition_id = partition_ref(params, limits)
        require_topic(http.principal, Action.CONSUME, topic)
        if params.get("consumer_id") is not None:
            pop = Pop.parse(params, limits)
            if clients is not None:
                clients.check(http.principal, "consumer", pop.consumer_id, topic)
            messages = service.pop(
                topic,
                partition_id,
                pop.consumer_id,
                pop.max_messages,
                pop.request_id,
                pop.sequence,
                request_deadline(http, limits),
                LongPoll(pop.wait_ms / 1000, pop.if_ready),
            )
            metrics.inc("popped_messages", len(messages), topic=topic)
        else:
            fetch = Fetch.parse(params, limits)
            messages = service.fetch(
                topic,
                partition_id,
                fetch.offset,
                fetch.max_messages,
                fetch.skip_removed,
                fetch.wait_ms / 1000,
                request_deadline(http, limits),
            )
            metrics.inc("fetched_messages", len(messages), topic=topic)
        return json_response({"messages": _to_json(topic, partition_id, messages)})


def add_stream_route(api: App, service: BrokerService, limits: Limits) -> None:
    """``GET /logs/stream``: a partition's messages from an offset on, as they come
    (``protocol.streams``)."""

    @api.get("/logs/stream", Action.CONSUME)
    def stream(http: HttpRequest) -> HttpResponse:
        fetch = Fetch.parse(request_params(http), limits)
        require_topic(http.principal, Action.CONSUME, fetch.topic)
        chunks = service.stream(
            fetch.topic, fetch.partition_id, fetch.offset, fetch.max_messages, fetch.skip_removed
        )
        return HttpResponse(200, headers=(("Content-Type", streams.CONTENT_TYPE),), stream=chunks)


def _to_json(
    topic: str, partition_id: PartitionId, messages: list[StoredMessage]
) -> list[dict[str, object]]:
    return [m.to_json(topic, partition_id) for m in messages]
