"""``/brokers``."""

from __future__ import annotations

from manager.services import BrokerOperations
from protocol.access import Action, Node
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import BrokerRef, RegisterBroker
from runtime.http_api import App, json_response, request_params
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(api: App, service: BrokerOperations, limits: Limits) -> None:
    @api.post("/brokers", Action.NODE)
    def register_broker(http: HttpRequest) -> HttpResponse:
        request = RegisterBroker.parse(request_params(http), limits)
        principal = http.principal
        signer = principal.broker_id if isinstance(principal, Node) else None
        if signer is not None and signer != request.broker_id:
            # Each broker signs as itself: one registers its own id only.
            raise RaftQError(
                ErrorCode.FORBIDDEN,
                f"broker {signer} may register itself only, not broker {request.broker_id}",
            )
        body, changed = service.register_broker(request)
        return json_response(body, 201 if changed else 200)

    @api.post("/brokers/drain", Action.ADMIN)
    def drain_broker(http: HttpRequest) -> HttpResponse:
        request = BrokerRef.parse(request_params(http), limits)
        return json_response(service.drain_broker(request.broker_id), 202)

    @api.route("DELETE", "/brokers/drain", Action.ADMIN)
    def cancel_drain(http: HttpRequest) -> HttpResponse:
        request = BrokerRef.parse(request_params(http), limits)
        return json_response(service.cancel_drain(request.broker_id))

    @api.route("DELETE", "/brokers", Action.ADMIN)
    def remove_broker(http: HttpRequest) -> HttpResponse:
        request = BrokerRef.parse(request_params(http), limits)
        return json_response(service.remove_broker(request.broker_id))

    @api.get("/brokers", Action.DESCRIBE)
    def list_brokers(http: HttpRequest) -> HttpResponse:
        return json_response(service.brokers())
