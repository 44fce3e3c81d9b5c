"""Every wait, retry and buffer bound of the client library, with its unit in its name."""

from __future__ import annotations

from dataclasses import dataclass, fields

from protocol.limits import Limits


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
            if getattr(self, field.name) <= 0:
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
        return self
