"""``/keys``: API keys (admins), and ``/keys/verify`` (brokers asking about a client's key)."""

from __future__ import annotations

from manager.services import ManagerServices
from protocol.access import Action
from protocol.limits import Limits
from protocol.requests import CreateKeyRequest, KeyRef, VerifyClient, VerifyKey
from runtime.http_api import App, json_response, request_params
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(api: App, services: ManagerServices, limits: Limits) -> None:
    @api.post("/keys", Action.ADMIN)
    def create_key(http: HttpRequest) -> HttpResponse:
        request = CreateKeyRequest.parse(request_params(http), limits)
        return json_response(services.keys.create_key(request), 201)

    @api.get("/keys", Action.ADMIN)
    def list_keys(http: HttpRequest) -> HttpResponse:
        return json_response(services.keys.keys())

    @api.post("/keys/revoke", Action.ADMIN)
    def revoke_key(http: HttpRequest) -> HttpResponse:
        return json_response(
            services.keys.revoke_key(KeyRef.parse(request_params(http), limits).key_id)
        )

    @api.post("/keys/verify", Action.NODE)
    def verify_key(http: HttpRequest) -> HttpResponse:
        request = VerifyKey.parse(request_params(http), limits)
        return json_response(services.keys.verify_key(request.key_id, request.key_hash))

    @api.post("/clients/verify", Action.NODE)
    def verify_client(http: HttpRequest) -> HttpResponse:
        return json_response(
            services.clients.verify_client(VerifyClient.parse(request_params(http), limits))
        )
