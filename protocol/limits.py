"""Every bound in RaftQ, with its unit in its name, checked against each other at start.

One frozen ``Limits`` object is built in each process's ``__main__`` (defaults, optionally
overridden from the command line) and passed down; nothing reads these constants directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace

from protocol import snapshot_fields


class LimitsError(ValueError):
    """The limits contradict each other or are out of range."""


_DEFAULT_IDLE_EXPIRY_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class PartitionLimits:
    """The limits a partition's apply uses. Replicated state, not local configuration: the
    manager fixes them when it creates a topic (from its own ``Limits``), records them with
    the topic and sends them in every ``ReplicaSpec``, so every replica of a partition
    applies with the same bounds whatever its broker's command line says."""

    unflushed_messages_max: int
    unflushed_bytes_max: int
    replica_lag_messages_max: int
    producers_max: int
    sequences_remembered: int
    consumers_max: int
    client_idle_expiry_ms: int = _DEFAULT_IDLE_EXPIRY_MS
    """A consumer or producer no command has named for longer is forgotten. The default is
    also what a replica created before this limit existed gets (snapshots lack it)."""
    retention_ms: int = 0
    """The topic's retention by age: messages older than this leave every replica (the log
    start moves past them). 0: kept however old (the default, as NATS JetStream's)."""
    retention_bytes: int = 0
    """The topic's retention by size, per partition (as Kafka's ``retention.bytes``): the
    oldest messages leave while the partition holds more. 0: no bound."""
    min_insync_replicas: int = 1
    """The topic's ``min.insync.replicas`` (Kafka's name): the partition leader refuses a
    produce (503 NOT_ENOUGH_REPLICAS, nothing stored) unless this many replicas, itself
    included, answered an append of its term within ``raft_leader_fallback_timeout_s``,
    and acknowledges one only once this many hold its entry (else 503
    NOT_ENOUGH_REPLICAS_AFTER_APPEND after ``min_insync_ack_wait_s_max``). A commit needs a
    majority anyway; the topic's default is that majority, which turns a write that would
    wait out its timeout with an unknown outcome into an immediate refusal; the replication
    factor refuses writes whenever any replica is away. 1 (no check beyond Raft's) is what
    replicas created before this limit existed get."""
    # Snapshots pickle the fields by position (slots): a field added later goes last.
    request_ids_remembered: int = 1
    """Recent request ids per consumer, of pops without a sequence, whose ranges a repeat
    or a late copy gets back (``partition_consumer_request_ids_max``). 1, only the last
    one, is what replicas created before this limit existed get."""
    groups_max: int = 100
    """Consumer groups with leased delivery in one partition (``partition_groups_max``)."""
    group_leases_max: int = 10_000
    """Messages one group has in flight in one partition (``partition_group_leases_max``)."""
    group_unsettled_max: int = 100_000
    """Messages one group has handed out, or held back for per-key ordering, and not yet
    settled, in one partition (``partition_group_unsettled_max``)."""
    group_scan_max: int = 10_000
    """Offsets one receive looks at in one partition (``partition_group_scan_max``)."""

    # Managers keep these in their registry and partitions in their logs, and both pickle
    # them into snapshots: one written before a field existed must load with its default
    # (dataclass pickling would leave it unset, and the next snapshot failed on it: a
    # manager restarted on newer code stopped compacting and lost its group).
    def __getstate__(self) -> list[object]:
        return snapshot_fields.state_of(self)

    def __setstate__(self, state: list[object]) -> None:
        snapshot_fields.restore(self, state)

    def to_json(self) -> dict[str, int]:
        return {spec.name: getattr(self, spec.name) for spec in fields(self)}

    @classmethod
    def from_json(cls, body: object) -> PartitionLimits:
        """Every field, each a positive integer (retention: 0 or more); the fields added
        later may be missing (older specs). ``ValueError`` otherwise."""
        names = [spec.name for spec in fields(cls)]
        if not isinstance(body, Mapping) or not set(body) <= set(names):
            raise ValueError(f"partition limits hold only {', '.join(names)}")
        values: dict[str, int] = {}
        for name in names:
            if name not in body and name in _LATER_FIELDS:
                continue
            value = body.get(name)
            low = 0 if name in _RETENTION_FIELDS else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"partition limit {name} must be an integer >= {low}")
            values[name] = value
        return cls(**values)

    def with_every_field(self) -> PartitionLimits:
        """These limits unpickled from a snapshot older than some field: the missing ones
        get their defaults (a slot never set cannot be read)."""
        if all(hasattr(self, spec.name) for spec in fields(self)):
            return self
        known = {s.name: getattr(self, s.name) for s in fields(self) if hasattr(self, s.name)}
        return PartitionLimits(**known)


_RETENTION_FIELDS = frozenset({"retention_ms", "retention_bytes"})
_LATER_FIELDS = _RETENTION_FIELDS | {
    "client_idle_expiry_ms",
    "min_insync_replicas",
    "request_ids_remembered",
    "groups_max",
    "group_leases_max",
    "group_unsettled_max",
    "group_scan_max",
}


@dataclass(frozen=True, slots=True)
class Limits:
    # --- messages and requests -------------------------------------------------------------
    message_bytes_max: int = 1024 * 1024
    """Largest message value plus key plus header names and values, in UTF-8 bytes."""
    key_bytes_max: int = 1024
    """Largest message key, in UTF-8 bytes."""
    message_headers_max: int = 32
    """Most headers on one message."""
    header_name_bytes_max: int = 256
    """Longest header name, in UTF-8 bytes."""
    topic_name_chars_max: int = 200
    """Longest topic name."""
    id_chars_max: int = 200
    """Longest producer, consumer or request id."""
    request_messages_max: int = 10_000
    """Most messages in one produce request."""
    request_bytes_max: int = 16 * 1024 * 1024
    """Largest HTTP request body."""
    fetch_messages_max: int = 10_000
    """Most messages one fetch or pop returns."""
    topic_partitions_max: int = 256
    """Most partitions in one topic."""

    # --- partitions ------------------------------------------------------------------------
    partition_unflushed_messages_max: int = 500_000
    """Most committed messages held in memory until every replica has flushed them;
    past it appends get 429 with Retry-After."""
    partition_unflushed_bytes_max: int = 256 * 1024 * 1024
    """Same bound in bytes of message values and keys."""
    partition_replica_lag_messages_max: int = 100_000
    """A replica whose flushed offset is this far behind the most advanced one no longer holds
    messages in memory for itself (Kafka's old ``replica.lag.max.messages``); it copies what it
    missed from a peer's database when it returns. Never below what a majority has flushed."""
    partition_producers_max: int = 10_000
    """Producers whose last sequences a partition remembers; the least recently used is
    forgotten first (like Kafka's producer-id expiry)."""
    producer_sequences_remembered: int = 8
    """Recent sequences per producer whose offsets a duplicate batch gets back."""
    partition_consumers_max: int = 10_000
    """Consumers with an offset in one partition."""
    partition_consumer_request_ids_max: int = 8
    """Recent request ids a partition remembers per consumer, for pops without a sequence
    (raw clients): a repeat or a late copy of any of them gets its range again and claims
    nothing; an older one is taken for a new pop. At most ``partition_consumers_max`` times
    this many ids of up to ``id_chars_max`` characters per partition (16 MB at the
    defaults, reached only by that many raw clients)."""
    partition_groups_max: int = 100
    """Consumer groups with leased delivery in one partition (issue 20)."""
    partition_group_leases_max: int = 10_000
    """Messages one consumer group may have in flight in one partition: a receive past it
    answers fewer (or none) until acks, nacks or expiries free room."""
    partition_group_unsettled_max: int = 100_000
    """Messages one group has handed out, or held back for per-key ordering, and not yet
    settled, in one partition (~100 bytes of replicated state each)."""
    partition_group_scan_max: int = 10_000
    """Offsets one receive looks at in one partition (bounds the work of one apply)."""
    group_visibility_timeout_ms_default: int = 30_000
    """A consumer group's lease length when its creation names none (SQS's default)."""
    group_visibility_timeout_ms_min: int = 100
    """Shortest lease a group may have: a shorter one expires before a member can ack."""
    group_visibility_timeout_ms_max: int = 12 * 3600 * 1000
    """Longest lease a group may have (SQS's 12 hours): a member that died holding a lease
    delays its messages this long at most."""
    group_max_deliveries_max: int = 1_000
    """Highest ``max_deliveries`` a group may have (its default, 0, means no limit)."""
    group_key_window_max: int = 2_000
    """A receive of a group with per-key ordering that reaches messages which left memory
    reads their keys from the database (the log keeps keys only in memory): twice the
    messages it asks for, at most this many; it leases no further than the keys it has."""
    long_poll_wait_ms_max: int = 5_000
    """Longest a receive, pop or fetch may wait for messages (``wait_ms``, a long poll):
    well within every hop's request bound (``http_timeout_s``), so a long poll never times
    out."""
    long_poll_period_s: float = 0.05
    """A long poll over several partitions through the managers: the pause between asks of
    the partitions (an ask that finds nothing is answered by each partition's leader
    without a Raft entry). A long poll of one partition waits at its broker instead."""
    stream_poll_s: float = 0.1
    """A broker's long poll or stream looks at its partition again at least this often:
    entries a follower applies wake nothing (``broker.partition.applied``)."""
    stream_heartbeat_s: float = 5.0
    """A stream (``GET /logs/stream``) with nothing to send sends a comment this often, so
    either side sees a dead peer."""
    stream_s_max: float = 300.0
    """A stream ends after this long (its last event says where to go on): threads and
    connections come back, and a client that reconnects finds the partition's leader of
    the day."""
    streams_max: int = 64
    """Streams one broker serves at once; one more is refused (503 REFUSED: another replica,
    or later)."""
    stream_send_timeout_s: float = 10.0
    """A stream whose reader takes none of its bytes for this long is ended (a stuck or
    gone reader holds no thread longer)."""
    dead_letter_batch_max: int = 100
    """Most dead letters the manager leader reads from one broker per round (and marks in
    one request); it moves them each reconcile round (``reconcile_period_s``)."""
    group_redrive_scan_max: int = 100_000
    """Most messages of a dead-letter topic one redrive reads (``POST /groups/{group}/
    redrive``), its letters and other groups' together; past it the answer says ``more``
    and the next redrive goes on from there."""
    client_idle_expiry_s: float = 7 * 24 * 3600.0
    """A producer or consumer that no command has named for this long is forgotten: by each
    partition (its dedup window, its offset) and by the managers (its registration). Measured
    in the proposers' timestamps, so every replica expires the same clients. 7 days, Kafka's
    ``offsets.retention.minutes`` (its ``producer.id.expiration.ms`` is 1 day): losing a
    consumer's offset costs a re-read of the partition, so the longer of the two."""
    replication_factor: int = 3
    """Replicas per partition."""
    pop_sequence_ahead_s_max: float = 60.0
    """A pop's ``sequence`` (microseconds since the epoch, as the client library sends) may
    be at most this far ahead of the broker's clock (issue 23): a partition refuses any pop
    of that consumer older than its last, so one pop with a sequence far in the future
    would lock its consumer out until then. Counters (raw clients: 1, 2, 3) are far below."""
    producer_sequence_step_max: int = 1 << 40
    """How far a producer's batch ``sequence`` may move past the last one the partition
    holds for it (issue 23): one batch at 2^63-1 would make every later batch of that
    producer out of order. Gaps are allowed (a producer's sequences are spread over its
    partitions): 2^40 batches at a million a second elsewhere take 12 days."""

    # --- group commit (concurrent commands to one partition share one Raft entry) -------------
    group_commit_commands_max: int = 1_000
    """Most commands (produce batches, pops, flush marks) in one Raft entry."""
    group_commit_messages_max: int = 20_000
    """Most messages in one Raft entry (a single request's batch always fits)."""
    group_commit_queued_max: int = 10_000
    """Most commands waiting for one partition's next entry; past it, 429."""
    group_commit_queue_wait_s_max: float = 2.0
    """A command that waited this long without being proposed is withdrawn (429, nothing
    done) rather than proposed after its caller may have given up."""

    # --- flush -----------------------------------------------------------------------------
    flush_batch_messages_max: int = 5_000
    """Most messages one flush writes in one database transaction."""
    retention_check_period_s: float = 5.0
    """How often a partition leader's broker applies its topic's retention (a query over
    its database and, if messages are due to leave, one Raft command)."""
    flush_period_s: float = 0.1
    """Pause after a flush that was not full: flushing (and its ``mark_flushed`` Raft
    command) happens at this pace, not once per produced message."""
    flush_retry_backoff_s_max: float = 2.0
    """Longest pause after a failed flush."""
    flush_threads: int = 4
    """Threads per broker process running every hosted replica's flush and retention rounds
    (``broker.persistence.flush_pool``), whatever the number of replicas it hosts."""
    flushed_ack_wait_s_max: float = 3.0
    """Longest wait of a ``flushed`` produce for a majority of replicas to flush its batch
    (also bounded by its caller's deadline); past it, 503 COMMIT_TIMEOUT (stored and synced,
    retry with the same sequence to wait again)."""
    flushed_ack_poll_s: float = 0.005
    """How often that wait looks at the replicas' flushed offsets (and the wait for
    ``min_insync_replicas`` at the replicas' acknowledged entries)."""
    min_insync_ack_wait_s_max: float = 3.0
    """Longest wait, after a produce of a topic whose ``min_insync_replicas`` exceeds a
    majority committed, for that many replicas to hold its entry (also bounded by its
    caller's deadline); past it, 503 NOT_ENOUGH_REPLICAS_AFTER_APPEND."""

    # --- Raft ------------------------------------------------------------------------------
    raft_commit_timeout_s: float = 5.0
    """Longest wait for a replicated command to commit and apply before answering 503."""
    raft_leader_wait_s_max: float = 2.5
    """Longest wait for a partition to have a Raft leader (an election in progress) before
    answering 503 NO_LEADER."""
    raft_election_timeout_min_s: float = 0.4
    raft_election_timeout_max_s: float = 1.0
    raft_leader_fallback_timeout_s: float = 3.0
    """A leader that hears from no majority for this long steps down (pysyncobj: 30 s)."""
    raft_commit_notice_delay_s: float = 0.005
    """How long a leader may wait to tell its followers a new commit index when no entry
    carries it sooner (pysyncobj sent one more message to each follower per commit for it).
    A follower applies, and so flushes and serves reads, that much later at most."""
    raft_connection_timeout_s: float = 10.0
    """Long enough for a snapshot transfer of a full partition."""
    raft_log_compaction_entries_min: int = 20_000
    raft_log_compaction_time_min_s: int = 60
    raft_log_compaction_bytes_min: int = 32 * 1024 * 1024
    """A partition's Raft log is also compacted once its entries take this many bytes:
    pysyncobj holds every entry in memory until then, and with group commit an entry can
    carry thousands of messages, so neither the entry count nor the time bounds memory."""
    raft_snapshot_chunk_messages: int = 2_000
    """Messages a partition's snapshot pickles in one call, in the dump writer's thread: each
    call holds the GIL (~1.5 ms per 2,000 messages here), so the Raft tick thread waits at most
    about that long for it, however big the partition."""

    # --- HTTP between components -----------------------------------------------------------
    http_timeout_s: float = 10.0
    """Longest wait for one HTTP call between components (must exceed the commit timeout)."""
    deadline_clock_skew_s_max: float = 1.0
    """Clock skew between hosts that a request's absolute deadline (``X-RaftQ-Deadline-Ms``)
    is granted: a host whose clock runs ahead by more refuses such requests early."""
    node_signature_age_s_max: float = 30.0
    """A node's signed request (``protocol.node_auth``) is refused when its timestamp is
    further than this from the receiver's clock, in either direction: the hosts' clocks
    must agree to within this (less the time a request travels), and a request read off
    the wire can be replayed nowhere even within it (each signature is taken once)."""
    node_signatures_remembered_max: int = 100_000
    """Signatures a node remembers to refuse their replay, at most (``ReplayGuard``): each
    is kept until it is too old to be taken anyway. When full, the oldest second is
    forgotten and any request signed in it or earlier is refused (503 REFUSED: the sender
    signs anew); ~100 bytes each."""
    deadline_reply_margin_s: float = 0.2
    """Taken off the budget (``protocol.deadline``) a hop sends onward, so the callee gives up
    a little before its caller does and its answer still arrives."""
    http_connect_timeout_s: float = 1.0
    manager_peer_check_timeout_s: float = 1.0
    """A starting manager waits this long for each peer's peer list (``manager/peer_check``);
    a paused peer delays the start by this much and is skipped."""
    manager_proof_timeout_s: float = 2.0
    """Longest wait for the answer of a manager the leader is asked to add to its address
    check (``manager/address_proof.py``): it runs already, and answers at once."""
    manager_join_poll_s: float = 1.0
    """How often a manager that no running peer lists yet (it waits to be added) asks its
    peers whether they list it now."""
    http_connections_max: int = 512
    """Connections one node serves at once (a thread each); one more is answered 503 REFUSED."""
    http_header_bytes_max: int = 64 * 1024
    """Largest request line plus headers (431 beyond)."""
    http_request_read_timeout_s: float = 10.0
    """A request must arrive whole within this long of its first byte (408 otherwise): a
    client that trickles bytes holds a connection thread no longer."""
    http_keepalive_idle_s: float = 60.0
    """An idle keep-alive connection is closed after this long."""
    http_shutdown_grace_s: float = 5.0
    """On SIGTERM, how long requests in progress may still finish."""
    http_idle_connections_per_peer_max: int = 64
    """Idle keep-alive connections a node keeps to each peer node (more are opened when
    needed and closed after use)."""
    http_idle_connection_s_max: float = 30.0
    """An idle connection to a peer is not reused after this long (well below the peer's
    ``http_keepalive_idle_s``, so the peer never closes one as it is being reused)."""
    http_retries_max: int = 3
    """Attempts for a call that is safe to repeat."""
    http_retry_backoff_s_max: float = 0.5
    read_wait_s_max: float = 2.0
    """Longest wait for a replica to apply a range it has just been told is committed."""

    # --- managers, brokers and load balancer ---------------------------------------------
    broker_poll_period_s: float = 0.5
    """How often the manager leader polls each broker's /partitions (the heartbeat)."""
    broker_dead_after_s: float = 3.0
    """A broker that has not answered for this long is marked dead."""
    broker_replace_after_s: float = 60.0
    """A broker held dead this long (after ``broker_dead_after_s``, counted by the current
    manager leader) has its replicas moved to live brokers, one partition at a time
    (re-replication, ``manager/replica_mover.py``). Longer than a
    restart takes, so a broker that is only restarting keeps its replicas."""
    replica_moves_max: int = 1
    """Partitions whose replica moves at once (each copies a snapshot and the database)."""
    replica_move_stall_s: float = 60.0
    """A move that has not finished this long after the current manager leader first saw
    it no longer counts toward ``replica_moves_max``: one partition that cannot progress
    (its new broker or a majority away) must not hold every other move."""
    replica_moves_stalled_max: int = 8
    """Most stalled moves that may each let one more move start (the bound on moves at
    once is ``replica_moves_max`` plus this)."""
    broker_register_period_s: float = 5.0
    """How often a broker re-registers with the managers (idempotent)."""
    manager_poll_period_s: float = 0.2
    """How often the load balancer asks every manager who leads."""
    lb_managers_max: int = 9
    """Most managers the load balancer polls: those it was started with, and those it
    learns of since (a manager added later, named as the leader by the others)."""
    manager_poll_timeout_s: float = 0.5
    """Longest wait for one manager's /raft_status answer: a paused manager must not hold
    back the load balancer's view of the others."""
    leader_balance_period_s: float = 10.0
    """How often the manager leader asks for one leadership transfer when brokers lead
    unevenly (``manager/leader_balance.py``)."""
    reconcile_period_s: float = 0.5
    """How often the manager leader resumes half-done multi-step operations."""
    registry_topics_max: int = 10_000
    registry_clients_max: int = 1_000_000
    """Most producers plus consumers the managers remember."""
    registry_brokers_max: int = 1_000
    """Most brokers the managers remember."""
    registry_keys_max: int = 10_000
    """Most API keys the managers remember."""
    key_cache_s: float = 5.0
    """How long a broker trusts what the manager leader said about an API key (also that it
    is unknown): a revoked key still works on the direct path for up to this long."""
    key_cache_entries_max: int = 10_000
    """Keys a broker remembers; when full it forgets them all (each is asked again)."""
    manager_http_threads_max: int = 16
    """Threads a manager uses for parallel calls to brokers (polls, produce groups)."""
    retry_after_s: int = 1
    """Value of the Retry-After header on 429 and 503."""

    # --- metrics (issue 23: a scrape's cost does not grow with what callers make) ------------
    metrics_refresh_s: float = 10.0
    """A broker computes its consumer and group figures for ``/metrics`` (an offset per
    consumer in memory, a database read per figure shown) at most this often, however
    often it is scraped; scrapes in between get the last figures."""
    metrics_consumers_per_partition_max: int = 10
    """Consumers shown per partition in ``consumer_lag_*`` (the most lagging ones; every
    partition also shows its consumer count and its largest lag): the series of a scrape,
    and its database reads, are bounded by the partitions, not by the consumers anyone
    registers."""

    def partition_limits(self) -> PartitionLimits:
        """The partition limits a manager records for a topic it creates."""
        return PartitionLimits(
            unflushed_messages_max=self.partition_unflushed_messages_max,
            unflushed_bytes_max=self.partition_unflushed_bytes_max,
            replica_lag_messages_max=self.partition_replica_lag_messages_max,
            producers_max=self.partition_producers_max,
            sequences_remembered=self.producer_sequences_remembered,
            consumers_max=self.partition_consumers_max,
            client_idle_expiry_ms=int(self.client_idle_expiry_s * 1000),
            request_ids_remembered=self.partition_consumer_request_ids_max,
            groups_max=self.partition_groups_max,
            group_leases_max=self.partition_group_leases_max,
            group_unsettled_max=self.partition_group_unsettled_max,
            group_scan_max=self.partition_group_scan_max,
        )

    def validate(self) -> Limits:
        """Raise ``LimitsError`` unless every limit is positive and they agree with each other
        (``_RULES``)."""
        for field in fields(self):
            value = getattr(self, field.name)
            if value <= 0:
                raise LimitsError(f"{field.name} must be positive, got {value}")
        for rule, holds in _RULES:
            _require(holds(self), rule)
        return self

    def with_overrides(self, overrides: dict[str, str]) -> Limits:
        """A copy with some limits replaced from ``name=value`` strings, validated."""
        known = {f.name: f for f in fields(self)}
        changes: dict[str, object] = {}
        for name, text in overrides.items():
            if name not in known:
                raise LimitsError(f"unknown limit {name!r}")
            kind = type(getattr(self, name))
            try:
                changes[name] = kind(text)
            except ValueError as exc:
                raise LimitsError(f"{name}: {exc}") from exc
        return replace(self, **changes).validate()  # type: ignore[arg-type]


_RULES: tuple[tuple[str, Callable[[Limits], bool]], ...] = (
    (
        "key_bytes_max <= message_bytes_max",
        lambda limits: limits.key_bytes_max <= limits.message_bytes_max,
    ),
    (
        "message_bytes_max <= request_bytes_max",
        lambda limits: limits.message_bytes_max <= limits.request_bytes_max,
    ),
    (
        "flush_batch_messages_max <= partition_unflushed_messages_max",
        lambda limits: limits.flush_batch_messages_max <= limits.partition_unflushed_messages_max,
    ),
    (
        "partition_replica_lag_messages_max < partition_unflushed_messages_max",
        lambda limits: limits.partition_replica_lag_messages_max
        < limits.partition_unflushed_messages_max,
    ),
    (
        "request_messages_max <= partition_unflushed_messages_max",
        lambda limits: limits.request_messages_max <= limits.partition_unflushed_messages_max,
    ),
    (
        "message_bytes_max <= partition_unflushed_bytes_max",
        lambda limits: limits.message_bytes_max <= limits.partition_unflushed_bytes_max,
    ),
    (
        "raft_election_timeout_min_s < raft_election_timeout_max_s",
        lambda limits: limits.raft_election_timeout_min_s < limits.raft_election_timeout_max_s,
    ),
    (
        "raft_commit_notice_delay_s < raft_election_timeout_min_s",
        lambda limits: limits.raft_commit_notice_delay_s < limits.raft_election_timeout_min_s,
    ),
    (
        "raft_election_timeout_max_s < raft_leader_fallback_timeout_s",
        lambda limits: limits.raft_election_timeout_max_s < limits.raft_leader_fallback_timeout_s,
    ),
    (
        "raft_leader_wait_s_max + raft_commit_timeout_s < http_timeout_s",
        lambda limits: limits.raft_leader_wait_s_max + limits.raft_commit_timeout_s
        < limits.http_timeout_s,
    ),
    (
        "request_messages_max <= group_commit_messages_max",
        lambda limits: limits.request_messages_max <= limits.group_commit_messages_max,
    ),
    (
        "group_commit_queue_wait_s_max + raft_leader_wait_s_max + raft_commit_timeout_s "
        "< http_timeout_s (a queued command is answered before its caller gives up)",
        lambda limits: limits.group_commit_queue_wait_s_max
        + limits.raft_leader_wait_s_max
        + limits.raft_commit_timeout_s
        < limits.http_timeout_s,
    ),
    (
        "raft_commit_timeout_s < http_timeout_s (a broker answers before its caller gives up)",
        lambda limits: limits.raft_commit_timeout_s < limits.http_timeout_s,
    ),
    (
        "broker_poll_period_s < broker_dead_after_s",
        lambda limits: limits.broker_poll_period_s < limits.broker_dead_after_s,
    ),
    (
        "broker_dead_after_s <= broker_replace_after_s",
        lambda limits: limits.broker_dead_after_s <= limits.broker_replace_after_s,
    ),
    (
        "deadline_clock_skew_s_max <= node_signature_age_s_max (clocks that deadlines "
        "tolerate must not make the nodes refuse each other's requests)",
        lambda limits: limits.deadline_clock_skew_s_max <= limits.node_signature_age_s_max,
    ),
    (
        "http_idle_connection_s_max < http_keepalive_idle_s",
        lambda limits: limits.http_idle_connection_s_max < limits.http_keepalive_idle_s,
    ),
    (
        "replication_factor is odd",
        lambda limits: limits.replication_factor % 2 == 1,
    ),
    (
        "partition_group_leases_max <= partition_group_unsettled_max",
        lambda limits: limits.partition_group_leases_max <= limits.partition_group_unsettled_max,
    ),
    (
        "group_visibility_timeout_ms_min <= group_visibility_timeout_ms_default "
        "<= group_visibility_timeout_ms_max",
        lambda limits: limits.group_visibility_timeout_ms_min
        <= limits.group_visibility_timeout_ms_default
        <= limits.group_visibility_timeout_ms_max,
    ),
)
"""How the limits must agree with each other, each as its message says."""


def _require(condition: bool, rule: str) -> None:
    if not condition:
        raise LimitsError(f"limits disagree: {rule} must hold")
