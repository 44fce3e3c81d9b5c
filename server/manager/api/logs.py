"""``/logs``: produce (POST), and pop (GET with ``consumer_id``) or fetch (GET with ``topic``,
``partition_id`` and ``offset``)."""

from __future__ import annotations

from manager.log_router import LogRouter
from protocol.access import Action, require_owner, require_topic
from protocol.limits import Limits
from protocol.requests import Fetch, Pop, Produce
from runtime.http_api import App, json_response, request_deadline, request_params
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(api: App, router: LogRouter, limits: Limits) -> None:
    @api.post("/logs", Action.PRODUCE)
    def produce(http: HttpRequest) -> HttpResponse:
        request = Produce.parse(request_params(http), limits)
        require_topic(http.principal, Action.PRODUCE, request.topic)
        if request.producer_id is not None:  # an unknown one gets its 404 from the router
            producer = router.producer(request.producer_id)
            owner = None if producer is None else producer.owner
            require_owner(http.principal, f"producer {request.producer_id!r}", owner)
        return json_response(router.produce(request, request_deadline(http, limits)), 201)

    @api.get("/logs", Action.CONSUME)
    def consume(http: HttpRequest) -> HttpResponse:
        params = request_params(http)
        deadline = request_deadline(http, limits)
        if params.get("consumer_id") is not None:
            pop = Pop.parse(params, limits)
            consumer = router.consumer(pop.consumer_id)
            if consumer is not None:  # an unknown consumer gets its 404 from the router
                require_topic(http.principal, Action.CONSUME, consumer.topic)
                require_owner(http.principal, f"consumer {pop.consumer_id!r}", consumer.owner)
            return json_response(router.pop(pop, deadline))
        fetch = Fetch.parse(params, limits)
        require_topic(http.principal, Action.CONSUME, fetch.topic)
        return json_response(router.fetch(fetch, deadline))
