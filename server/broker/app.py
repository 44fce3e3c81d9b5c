"""``create_app(config)``: builds a broker: its store, its replicas (they rejoin their Raft
groups), registration with the managers, and the HTTP API."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from broker.access import ClientVerifier, KeyVerifier
from broker.api.groups import add_group_routes
from broker.api.logs import add_log_routes, add_stream_route
from broker.api.partitions import RaftPorts, add_partition_routes
from broker.api.status import add_status_routes
from broker.config import BrokerConfig
from broker.hosted_replica import HostedReplica
from broker.managers import Managers
from broker.partition.raft import partition_raft
from broker.peer_copy import PeerCopy
from broker.persistence.flush_pool import FlushPool
from broker.persistence.sql_store import SqlMessageStore
from broker.registration import Registration
from broker.service import BrokerService, ReplicaStatus
from protocol.limits import Limits
from protocol.openapi import Node, api_document
from protocol.requests import RegisterBroker
from protocol.types import BrokerId, ReplicaSpec
from runtime.durable_files import make_directories
from runtime.http_api import App, add_document_route, count_requests
from runtime.http_auth import NodeVerifier, authenticator
from runtime.http_client import JsonHttpClient, PeerLink
from runtime.metrics import Metrics, Refreshed


def create_app(config: BrokerConfig) -> App:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    make_directories(config.data_dir)
    store = SqlMessageStore(config.db_url)

    link = PeerLink.of(config.secret, config.tls, f"broker-{config.broker_id}")
    peers = PeerCopy(config.limits, link)
    # Every hosted replica's flush and retention rounds, on ``flush_threads`` threads.
    flush_pool = FlushPool(config.limits.flush_threads, config.limits.flush_retry_backoff_s_max)
    flush_pool.start()

    def make_replica(spec: ReplicaSpec) -> HostedReplica:
        replica_dir = os.path.join(config.data_dir, "replicas", f"{spec.topic}-{spec.partition_id}")
        raft = partition_raft(spec, replica_dir, config.secret, config.limits)
        return HostedReplica(spec, raft, store, config.limits, peers.read, flush_pool)

    service = BrokerService(store, make_replica, config.limits, lambda: int(time.time() * 1000))
    service.start()
    metrics = Metrics("raftq_broker")
    _register_gauges(metrics, service)
    _register_client_gauges(metrics, service, config.limits)

    # One attempt per manager and a short wait: a client waits on these checks (and falls
    # back to the load balancer on 503).
    once = replace(config.limits, http_retries_max=1)
    asking = JsonHttpClient(once, link, timeout_s=config.limits.http_connect_timeout_s)
    keys = KeyVerifier(Managers(config.managers, config.limits, asking), config.limits)
    clients = ClientVerifier(Managers(config.managers, config.limits, asking), config.limits)
    app = App(
        "broker",
        config.limits,
        authenticator(
            NodeVerifier(
                config.secret, [config.address], config.limits, certified_only=config.tls.mutual
            ),
            keys.grant,
            config.metrics_token,
        ),
    )
    add_status_routes(app, service, config.broker_id, metrics, config.limits)
    add_document_route(app, api_document(Node.BROKER))
    add_log_routes(app, service, config.limits, metrics, clients)
    add_stream_route(app, service, config.limits)
    add_group_routes(app, service, config.limits, metrics)
    ports = RaftPorts(config.host, config.raft_port_min, config.raft_port_max)
    add_partition_routes(app, service, config.broker_id, config.limits, ports)
    count_requests(app, metrics)

    managers = Managers(config.managers, config.limits, JsonHttpClient(config.limits, link))
    registration = Registration(managers, _announcement(config), config.limits, _stop_this_process)
    registration.start()
    app.on_close(flush_pool.close)  # closers run last first: after the replicas close
    app.on_close(service.close)
    return app


def _stop_this_process(_reason: str) -> None:
    """As SIGTERM does: requests in progress finish, then the process exits."""
    os.kill(os.getpid(), signal.SIGTERM)


def _announcement(config: BrokerConfig) -> RegisterBroker:
    return RegisterBroker(
        broker_id=BrokerId(config.broker_id),
        address=config.address,
        raft_host=config.host,
        raft_port_min=config.raft_port_min,
        raft_port_max=config.raft_port_max,
    )


Labels = tuple[tuple[str, str], ...]


def _register_gauges(metrics: Metrics, service: BrokerService) -> None:
    def per_replica(read: Callable[[ReplicaStatus], float]) -> Callable[[], dict[Labels, float]]:
        def values() -> dict[Labels, float]:
            return {_partition_labels(s): read(s) for s in service.statuses()}

        return values

    metrics.gauge("partition_end_offset", per_replica(lambda s: s.end_offset))
    metrics.gauge("partition_log_start_offset", per_replica(lambda s: s.log_start_offset))
    metrics.gauge("partition_is_leader", per_replica(lambda s: float(s.is_leader)))
    metrics.gauge("partition_has_quorum", per_replica(lambda s: float(s.has_quorum)))

    def flush_lag() -> dict[Labels, float]:
        """Leaders only: per replica, the committed messages it has not flushed yet."""
        return {
            (*_partition_labels(s), ("replica", str(replica))): s.end_offset - flushed
            for s in service.statuses()
            if s.is_leader
            for replica, flushed in enumerate(s.flushed_offsets)
        }

    metrics.gauge("replica_flush_lag_messages", flush_lag)

    def raft(field: str) -> Callable[[], dict[Labels, float]]:
        def values() -> dict[Labels, float]:
            return {
                (("partition", str(s["partition_id"])), ("topic", str(s["topic"]))): _number(
                    s[field]
                )
                for s in service.raft_statuses()
            }

        return values

    metrics.gauge("partition_raft_term", raft("term"))
    metrics.gauge("partition_raft_commit_index", raft("commit_index"))


@dataclass(frozen=True, slots=True)
class _ClientFigures:
    consumers: list[dict[str, object]]
    """The most lagging consumers of each partition led (``BrokerService.lag_figures``)."""
    consumer_counts: dict[tuple[str, int], int]
    groups: list[dict[str, object]]
    """Each group's figures in each partition led (at most ``partition_groups_max`` each,
    defined by admins)."""


def _register_client_gauges(metrics: Metrics, service: BrokerService, limits: Limits) -> None:
    """Consumer and group figures: computed at most every ``metrics_refresh_s`` (each costs
    database reads), however often ``/metrics`` is scraped, and bounded per partition."""

    def compute() -> _ClientFigures:
        consumers, counts = service.lag_figures(limits.metrics_consumers_per_partition_max)
        topics = sorted({s.spec.topic for s in service.statuses() if s.is_leader})
        groups = [g for topic in topics for g in service.group_figures(topic)[0]]
        return _ClientFigures(consumers, counts, groups)

    figures = Refreshed(compute, limits.metrics_refresh_s)

    def consumer_lag(field: str) -> Callable[[], dict[Labels, float]]:
        def values() -> dict[Labels, float]:
            return {
                (
                    ("consumer", str(c["consumer_id"])),
                    ("partition", str(c["partition_id"])),
                    ("topic", str(c["topic"])),
                ): _number(c[field])
                for c in figures().consumers
            }

        return values

    metrics.gauge("consumer_lag_messages", consumer_lag("lag_messages"))
    metrics.gauge("consumer_lag_seconds", consumer_lag("lag_s"))
    metrics.gauge(
        "partition_consumers",
        lambda: {
            (("partition", str(p)), ("topic", t)): float(n)
            for (t, p), n in figures().consumer_counts.items()
        },
    )

    def group_figure(field: str) -> Callable[[], dict[Labels, float]]:
        """Each consumer group's figure in each partition this broker leads (issue 20)."""

        def values() -> dict[Labels, float]:
            return {
                (
                    ("group", str(g["group"])),
                    ("partition", str(g["partition_id"])),
                    ("topic", str(g["topic"])),
                ): _number(g[field])
                for g in figures().groups
            }

        return values

    metrics.gauge("group_lag_messages", group_figure("lag_messages"))
    metrics.gauge("group_lag_seconds", group_figure("lag_s"))
    metrics.gauge("group_in_flight_messages", group_figure("in_flight"))
    metrics.gauge("group_dead_letters_pending", group_figure("dead_letters_pending"))


def _number(value: object) -> float:
    """A figure of the service's JSON-shaped answers (``raft_statuses``, ``consumer_lag``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a gauge needs a number, got {value!r}")
    return float(value)


def _partition_labels(status: ReplicaStatus) -> Labels:
    return (("partition", str(status.spec.partition_id)), ("topic", status.spec.topic))
