"""``/partitions`` (host a replica, list them), ``/consumers`` and ``/checksum``."""

from __future__ import annotations

from broker.service import BrokerService
from protocol.limits import Limits
from protocol.requests import get_int, parse_replica_spec, partition_ref, require_str
from runtime.http_api import App, json_response, request_params
from runtime.http_server import HttpRequest, HttpResponse

_OFFSET_MAX = 2**63 - 1


def add_partition_routes(api: App, service: BrokerService, broker_id: int, limits: Limits) -> None:
    @api.get("/partitions")
    def list_partitions(http: HttpRequest) -> HttpResponse:
        statuses = [status.to_json() for status in service.statuses()]
        return json_response({"broker_id": broker_id, "partitions": statuses})

    @api.post("/partitions")
    def host(http: HttpRequest) -> HttpResponse:
        spec = parse_replica_spec(request_params(http), limits)
        created = service.host(spec)
        return json_response(spec.to_json(), 201 if created else 200)

    @api.post("/consumers")
    def register_consumer(http: HttpRequest) -> HttpResponse:
        # Offsets are created at a consumer's first pop, at the log start offset (Kafka's
        # auto.offset.reset=earliest); registering only checks the partition is here.
        params = request_params(http)
        topic, partition_id = partition_ref(params, limits)
        consumer_id = require_str(params, "consumer_id", limits.id_chars_max)
        service.check_hosted(topic, partition_id)
        body = {"topic": topic, "partition_id": partition_id, "consumer_id": consumer_id}
        return json_response(body, 201)

    @api.get("/checksum")
    def checksum(http: HttpRequest) -> HttpResponse:
        params = request_params(http)
        topic, partition_id = partition_ref(params, limits)
        start = get_int(params, "start", minimum=0, maximum=_OFFSET_MAX, default=0)
        end = get_int(params, "end", minimum=start, maximum=_OFFSET_MAX)
        result, flushed = service.checksum(topic, partition_id, start, end)
        return json_response(
            {
                "start": result.start,
                "end": result.end,
                "count": result.count,
                "sha256": result.sha256,
                "flushed_offset": flushed,
            }
        )
