"""Every wait, retry and buffer bound of the client library, with its unit in its name."""

from __future__ import annotations

from dataclasses import dataclass, fields

from protocol.limits import Limits

_ZERO_ALLOWED = frozenset({"linger_ms", "max_block_ms"})
"""Bounds where 0 means "not at all" (send at once, never block), as in Kafka."""


@dataclass(frozen=True, slots=True)
class ClientLimits:
    connect_timeout_s: float = 2.0
    """Longest wait to open a connection to the load balancer."""
    request_timeout_s: float = 30.0
    """Longest wait for an answer once sent. Longer than the load balancer's own wait for the
    manager, so its precise 503 reaches us before we give up blind."""
    deadline_reply_margin_s: float = 0.2
    """Each request tells the server how long it is waited for (``X-RaftQ-Timeout-Ms``: the
    read timeout less this margin; ``X-RaftQ-Deadline-Ms``: the same as a point in wall time),
    so the server gives up first and its answer arrives."""
    attempts_max: int = 8
    """Tries of one request (the first plus retries) before giving up."""
    backoff_s_initial: float = 0.1
    """Upper bound of the random pause before the first retry; doubles per retry."""
    backoff_s_max: float = 2.0
    """Cap of the random pause between retries."""
    retry_after_s_max: float = 10.0
    """Cap on how long a server's Retry-After may make us wait."""
    batch_messages_max: int = 1_000
    """Most messages a producer sends in one request."""
    batch_bytes_max: int = 4 * 1024 * 1024
    """Most UTF-8 bytes of values and keys a producer sends in one request."""
    buffer_messages_max: int = 100_000
    """Most messages a producer holds unsent; ``send`` refuses more until ``flush``."""
    linger_ms: float = 5.0
    """``AsyncProducer``: longest a record waits in its partition's batch for more records
    before the batch is sent (Kafka's ``linger.ms``; 0 sends at once, allowed)."""
    async_batch_messages_max: int = 2_000
    """``AsyncProducer``: most records in one partition's batch (one request). Large, because
    a request's fixed cost (HTTP, a Raft entry on three replicas) dominates small messages,
    and a partition has one batch in flight: 2,000 cut the brokers' CPU per message by a
    third against ~370 (ARCHITECTURE, "Performance", fourth round)."""
    async_batch_bytes_max: int = 256 * 1024
    """``AsyncProducer``: most bytes of one partition's batch, counted as the records'
    values, keys and headers plus ``record_overhead_bytes`` each."""
    record_overhead_bytes: int = 32
    """``AsyncProducer``: bytes counted per record beside its value, key and headers (its
    JSON and pickled framing), so the bounds hold roughly for the encoded size."""
    buffer_bytes_max: int = 4 * 1024 * 1024
    """``AsyncProducer``: most bytes (as counted above) of records sent and not yet
    acknowledged or failed; a ``send`` past it blocks, at most ``max_block_ms``. The
    process holds several times this (each record is Python objects and a future: ~1 KiB
    for a 100-byte message), hence less than Kafka's 32 MiB; 4 MiB holds two rounds of
    full batches on three partitions."""
    max_block_ms: float = 60_000.0
    """``AsyncProducer.send``: longest wait for room in a full buffer (and for the first
    partition map) before raising ``BufferFullError`` (Kafka's ``max.block.ms``)."""
    in_flight_batches_per_partition_max: int = 1
    """``AsyncProducer``: batches of one partition sent and not yet answered. Only 1: a
    second would need the partition to refuse a batch whose predecessor it lacks (else a
    retried earlier batch lands after a later one, or is refused as out of order)."""
    delivery_timeout_ms: float = 120_000.0
    """``AsyncProducer``: longest a batch is retried (same sequence, same partition) before
    its futures fail with ``UnavailableError`` (``outcome_unknown`` if an attempt may have
    stored it); above a leader election and the load balancer's own retries."""
    broker_request_timeout_s: float = 10.0
    """Direct path: longest wait for a broker's answer once sent. Above the broker's own
    ``raft_leader_wait_s_max + raft_commit_timeout_s`` (7.5 s), so its precise 503 arrives
    first; a paused broker costs at most this before the request goes to the load balancer."""
    long_poll_period_s: float = 0.05
    """``GroupMember.receive(wait_ms=...)`` on the direct path: the pause between asks of
    the partitions' leaders while none has a message (an ask that finds nothing costs the
    partition no Raft entry)."""
    stream_read_timeout_s: float = 20.0
    """``Consumer.stream``: a stream that brings no byte for this long (its broker sends a
    heartbeat every 5 s) is given up and opened again."""
    stream_retry_pause_s: float = 0.2
    """``Consumer.stream``: the pause before opening a stream again after a failure."""
    stream_messages_max: int = 1_000
    """``Consumer.stream``: most messages one event of the stream holds."""
    stream_fallback_wait_ms: int = 5_000
    """``Consumer.stream`` through the load balancer (no broker known, or ``direct=False``):
    each fetch's long poll (the managers' ``long_poll_wait_ms_max``)."""
    follow_idle_poll_s: float = 0.5
    """``raftq consume --follow``: the pause after a poll that found nothing new."""
    broker_remove_poll_s: float = 0.5
    """``raftq broker remove``: how often it asks how many replicas are left to move."""
    line_count_chunk_bytes: int = 1024 * 1024
    """``raftq produce`` from a file on stdin: bytes read per step when counting its lines
    for the progress bar's total."""
    direct_parallel_requests_max: int = 8
    """Direct path: most partition groups of one batch sent at once (worker threads)."""
    partition_map_age_s_max: float = 10.0
    """Direct path: a partition map older than this is fetched again before use, so a
    partition added to the topic (or a new leader) is seen within this long."""
    partition_map_refresh_s_min: float = 0.5
    """Direct path: least time between two fetches of one topic's map (refusals ask for a
    fresh map; this bounds how often)."""
    partition_map_attempts_max: int = 2
    """Direct path: tries of one map fetch; a load balancer that does not answer must not
    hold up requests that can go to the brokers with the map in hand."""
    partition_map_timeout_s: float = 5.0
    """Direct path: longest wait for the map once asked (a paused load balancer must not
    hold up requests for the full ``request_timeout_s``)."""
    partition_maps_max: int = 64
    """Direct path: topics whose maps one client object keeps (least recently used dropped)."""
    broker_avoid_s: float = 5.0
    """Direct path: after a broker failed a request (refused, timed out, not the leader),
    its partitions go through the load balancer for this long, unless a fresh map names
    another leader."""

    def validate(self, server: Limits | None = None) -> ClientLimits:
        """Raise ``ValueError`` unless every bound is positive and fits the server's limits."""
        server = Limits() if server is None else server
        for field in fields(self):
            value = getattr(self, field.name)
            if value < 0 or (value == 0 and field.name not in _ZERO_ALLOWED):
                raise ValueError(f"{field.name} must be positive")
        if self.backoff_s_initial > self.backoff_s_max:
            raise ValueError("backoff_s_initial must not exceed backoff_s_max")
        if self.batch_messages_max > server.request_messages_max:
            raise ValueError(f"batch_messages_max exceeds {server.request_messages_max}")
        # Half the request limit leaves room for JSON quoting and escaping.
        if self.batch_bytes_max > server.request_bytes_max // 2:
            raise ValueError(f"batch_bytes_max exceeds {server.request_bytes_max // 2}")
        if self.partition_map_refresh_s_min > self.partition_map_age_s_max:
            raise ValueError("partition_map_refresh_s_min must not exceed partition_map_age_s_max")
        if self.batch_messages_max > self.buffer_messages_max:
            raise ValueError("batch_messages_max must not exceed buffer_messages_max")
        self._validate_async(server)
        return self

    def _validate_async(self, server: Limits) -> None:
        if self.async_batch_messages_max > server.request_messages_max:
            raise ValueError(f"async_batch_messages_max exceeds {server.request_messages_max}")
        if self.async_batch_bytes_max > self.batch_bytes_max:
            raise ValueError("async_batch_bytes_max must not exceed batch_bytes_max")
        if self.async_batch_bytes_max > self.buffer_bytes_max:
            raise ValueError("async_batch_bytes_max must not exceed buffer_bytes_max")
        if self.in_flight_batches_per_partition_max != 1:
            raise ValueError(
                "in_flight_batches_per_partition_max must be 1: the partitions do not yet "
                "refuse a batch whose predecessor is missing"
            )
