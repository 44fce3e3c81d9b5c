"""``/partitions`` (host a replica, list them), ``/consumers`` and ``/checksum``."""

from __future__ import annotations

from dataclasses import dataclass

from broker.service import BrokerService
from protocol.access import Action, require_topic
from protocol.limits import Limits
from protocol.requests import (
    ChecksumRange,
    ReplaceMember,
    ReplicaConsumer,
    ReplicaRef,
    TopicRef,
    invalid,
    parse_replica_spec,
)
from protocol.types import ReplicaSpec
from runtime.http_api import App, json_response, request_params
from runtime.http_server import HttpRequest, HttpResponse


@dataclass(frozen=True, slots=True)
class RaftPorts:
    """Where this broker's replicas listen: its host, its range of Raft ports."""

    host: str
    port_min: int
    port_max: int

    def check(self, spec: ReplicaSpec, broker_id: int) -> None:
        """400 unless the replica ``spec`` asks this broker to host is this broker's, at a
        Raft address of its own: a spec naming another host or port (a made-up one, or one
        for another broker) would make this broker bind a port that is not its to take."""
        mine = spec.replicas[spec.replica_id]
        host, _, port = spec.raft_address.rpartition(":")
        if mine.broker_id != broker_id:
            raise invalid(f"replica {spec.replica_id} is broker {mine.broker_id}'s, not this one's")
        if host != self.host or not self.port_min <= int(port) <= self.port_max:
            raise invalid(
                f"raft_address {spec.raft_address} is not this broker's: it hosts replicas at "
                f"{self.host}:{self.port_min}-{self.port_max}"
            )


def add_partition_routes(
    api: App, service: BrokerService, broker_id: int, limits: Limits, ports: RaftPorts
) -> None:
    _add_replica_routes(api, service, broker_id, limits, ports)

    @api.post("/consumers", Action.CONSUME)
    def register_consumer(http: HttpRequest) -> HttpResponse:
        # Offsets are created at a consumer's first pop, at the log start offset (Kafka's
        # auto.offset.reset=earliest); registering only checks the partition is here.
        request = ReplicaConsumer.parse(request_params(http), limits)
        require_topic(http.principal, Action.CONSUME, request.topic)
        service.check_hosted(request.topic, request.partition_id)
        body = {
            "topic": request.topic,
            "partition_id": request.partition_id,
            "consumer_id": request.consumer_id,
        }
        return json_response(body, 201)

    @api.post("/leadership", Action.NODE)
    def transfer_leadership(http: HttpRequest) -> HttpResponse:
        request = ReplicaRef.parse(request_params(http), limits)
        body = service.transfer_leadership(
            request.topic, request.partition_id, request.raft_address
        )
        return json_response(body, 202)

    @api.get("/lag", Action.DESCRIBE)
    def consumer_lag(http: HttpRequest) -> HttpResponse:
        request = TopicRef.parse(request_params(http), limits)
        consumers, partitions = service.consumer_lag(request.topic)
        return json_response({"consumers": consumers, "partitions": partitions})

    @api.get("/checksum", Action.NODE)
    def checksum(http: HttpRequest) -> HttpResponse:
        request = ChecksumRange.parse(request_params(http), limits)
        result, flushed = service.checksum(
            request.topic, request.partition_id, request.start, request.end
        )
        return json_response(
            {
                "start": result.start,
                "end": result.end,
                "count": result.count,
                "sha256": result.sha256,
                "flushed_offset": flushed,
            }
        )


def _add_replica_routes(
    api: App, service: BrokerService, broker_id: int, limits: Limits, ports: RaftPorts
) -> None:
    """The replicas this broker hosts: listed to any key; hosted, dropped and given new
    members by the managers (nodes)."""

    @api.get("/partitions", Action.DESCRIBE)
    def list_partitions(http: HttpRequest) -> HttpResponse:
        statuses = [status.to_json() for status in service.statuses()]
        return json_response({"broker_id": broker_id, "partitions": statuses})

    @api.post("/partitions", Action.NODE)
    def host(http: HttpRequest) -> HttpResponse:
        spec = parse_replica_spec(request_params(http), limits)
        ports.check(spec, broker_id)
        created = service.host(spec)
        return json_response(spec.to_json(), 201 if created else 200)

    @api.route("DELETE", "/partitions", Action.NODE)
    def drop(http: HttpRequest) -> HttpResponse:
        request = ReplicaRef.parse(request_params(http), limits)
        dropped = service.drop(request.topic, request.partition_id, request.raft_address)
        body = {"topic": request.topic, "partition_id": request.partition_id, "dropped": dropped}
        return json_response(body)

    @api.post("/partitions/members", Action.NODE)
    def replace_member(http: HttpRequest) -> HttpResponse:
        request = ReplaceMember.parse(request_params(http), limits)
        body = service.replace_member(
            request.spec, request.moved_replica_id, request.removed, request.removed_alive
        )
        return json_response(body)
