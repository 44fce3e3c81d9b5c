"""``RaftNode``: pysyncobj's ``SyncObj`` with RaftQ's fixes and what ``RaftMachine`` needs.

- **A late acknowledgement never moves a follower's next index back.** pysyncobj sets
  ``nextIndex = acknowledged + 1`` on every successful answer, even one that answers an
  older append while newer ones are in flight. The leader then re-sends entries the
  follower holds, and pysyncobj's follower deletes *everything* after the re-sent range
  before appending it, including entries it had acknowledged: the leader counted them
  toward a commit, and for a moment only the leader holds them (a leader crash then loses
  a committed entry). Seen with three local processes proposing one entry at a time: 0 to
  24 "truncating already-applied log entries" per 500 entries; none with this fix. Raft's
  leader only moves ``nextIndex`` forward on success; a refusal (``reset``) still moves it
  back.
- **A restart keeps the journal's entries past the full dump.** On its first tick pysyncobj
  loads the dump and keeps the journal only if the journal *starts* with the dump's last two
  entries; otherwise it clears the journal and starts from the dump. The journal starts
  there only once the compaction that follows a dump is done, so a node killed after its
  dump was renamed into place and before the journal was compacted (pysyncobj: until its
  next tick; with ``DumpWriter``: while the journal is rewritten) came back without every
  entry after the dump: those appended meanwhile and, on a follower, those received but
  not yet applied when the dump was taken, all acknowledged, counted by the leader toward
  a commit. Raft's rule, applied here: when the journal holds the dump's last entry (same
  index and term), drop only what comes before it (``DurableFileJournal.keep_from``).
  Tested by ``unit_tests/runtime/replication/raft/test_node.py`` (kill -9 right after a snapshot).
- **An entry sent in parts arrives whole, at once.** pysyncobj sends an entry of at least
  ``appendEntriesBatchSizeBytes`` (64 KiB) in parts (``transmission``: start, process,
  finish), but marks the part that finishes by the length of the entry's command, not of
  its pickled form, which is a few dozen bytes longer. For a command within those bytes
  below a multiple (two or more) of 64 KiB, the last part but one is marked finished too:
  the follower unpickles a truncated entry, the exception ends its tick (pysyncobj logs
  "failed _onTick"), and the entry waits for the leader's next part or retry: 0.15-0.2 s
  instead of 0.06 in-process. Group commit makes entries of any size, so some land there.
  ``EntryParts`` keeps each leader's parts and passes a part marked finished on as one
  more part until they unpickle, then hands pysyncobj the whole entry as a plain append.
  Tested by ``unit_tests/runtime/replication/raft/test_node.py`` (entries of exactly 128
  and 192 KiB).
- **Found by the simulator** (``sim/``; ARCHITECTURE.md, "Deterministic simulation"): a
  late or repeated append no longer deletes the entries after it (``_stale_append``: Raft
  deletes only conflicting entries, and the leader kept counting the deleted ones); a part
  of a snapshot no longer moves the commit index over a log the leader never matched; a
  late snapshot whose last entry the log holds keeps the entries after it; a refused
  append is answered with the index after the follower's commit index, not the refused
  one (pysyncobj's leader backed up one entry per round trip, undone by each send of new
  entries: a follower with a diverged tail never caught up, seed 5079); a snapshot's
  answer names its last entry, not the log's end (the entries kept after it may be of
  an old term); a vote repeated by the network counts once (``_repeated_vote``).
- **Its journal** (``DurableFileJournal``), for the machine's byte-bounded compaction, and
  its full dump written by a thread of its own (``DumpWriter``; ``useFork`` is ignored).
- **A snapshot's receiver takes the sender's members.** pysyncobj stores in a dump the
  members of when the dump was taken, and a node that joined by a snapshot keeps that one
  as its dump until it compacts: a new member installing it took members two moves old,
  without the current ones, and pysyncobj's transport refuses connections from
  non-members. Once leadership moved to a member it did not list, it followed no one and
  its move never finished (membership nemesis, seeds 101 and 501). The snapshot's last
  part carries the sender's members (``SnapshotTransport``), and the receiver takes them
  in place of the dump's. A leader of an older version sends none: rolling upgrades are
  not supported yet (ARCHITECTURE.md).
- **Its frames** cost less CPU: encrypted by ``FrameCipher`` (each token verified once)
  and compressed by ``FrameZlib`` (a small frame without a 256 KiB deflate state),
  the same Fernet tokens and zlib streams pysyncobj reads (``frame_cipher.py``,
  ``frame_compression.py``).
- **Where an entry landed**, for acknowledgements that say what they mean: the index and
  term of the entry being applied (``applying_entry``, inside an apply), how many replicas
  hold an index (``replicas_holding``, on the leader), and entries of chosen replicated
  methods left unsynced in the journal (``leave_unsynced``: ``replicated`` durability).

pysyncobj takes every attribute a subclass sets after ``SyncObj.__init__`` to be replicated
state and pickles it into snapshots, so this class sets its own attributes before.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import threading
import time
from collections.abc import Callable
from typing import Any

import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.syncobj import SyncObjException
from pysyncobj.transport import TCPTransport, Transport

from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.types import RaftRole
from runtime.replication.machine import RaftStatus
from runtime.replication.raft import frame_cipher, frame_compression
from runtime.replication.raft import journal as durable_journal
from runtime.replication.raft.dump import DumpWriter
from runtime.replication.raft.journal import DurableFileJournal, opened
from runtime.replication.raft.tick_loop import NodePoller, TickLoop

_LEADER_POLL_S = 0.02
_ANY_MEMBER = "*"
"""``transfer_leadership``'s target when none is named: a Raft address never has this form."""
_ROLES = {0: RaftRole.FOLLOWER, 1: RaftRole.CANDIDATE, 2: RaftRole.LEADER}


def raft_conf(
    limits: Limits,
    *,
    secret: str,
    bind_address: str,
    journal_file: str,
    dump_file: str,
    membership_changes: bool = False,
    auto_tick: bool = True,
) -> SyncObjConf:
    """The configuration every Raft group of RaftQ runs with (partitions and managers).
    ``membership_changes``: the group's members can be replaced one at a time
    (``RaftNode.change_member``; partitions, for re-replication)."""
    return SyncObjConf(
        password=secret,  # without it pysyncobj unpickles anything from anyone
        bindAddress=bind_address,  # never 0.0.0.0
        appendEntriesUseBatch=False,  # with batching every commit waits for a 100 ms tick
        leaderFallbackTimeout=limits.raft_leader_fallback_timeout_s,
        raftMinTimeout=limits.raft_election_timeout_min_s,
        raftMaxTimeout=limits.raft_election_timeout_max_s,
        connectionTimeout=limits.raft_connection_timeout_s,
        # Both files are needed to survive a restart of the whole cluster.
        journalFile=journal_file,
        fullDumpFile=dump_file,
        logCompactionMinEntries=limits.raft_log_compaction_entries_min,
        logCompactionMinTime=limits.raft_log_compaction_time_min_s,
        useFork=False,  # the dump is written by DumpWriter's thread instead
        commandsWaitLeader=False,  # fail fast without a leader
        dynamicMembershipChange=membership_changes,
        autoTick=auto_tick,  # False: its owner ticks it (``RaftNode.doTick``)
    )


_NOTHING_DONE = {
    FAIL_REASON.QUEUE_FULL: (ErrorCode.BACKPRESSURE, "the Raft command queue is full"),
    FAIL_REASON.MISSING_LEADER: (ErrorCode.NO_LEADER, "the group has no Raft leader"),
    FAIL_REASON.NOT_LEADER: (ErrorCode.NOT_LEADER, "the leader it was sent to no longer leads"),
    FAIL_REASON.DISCARDED: (ErrorCode.NOT_LEADER, "a new leader replaced the entry"),
    FAIL_REASON.REQUEST_DENIED: (ErrorCode.NOT_LEADER, "the Raft leader refused the command"),
}
"""pysyncobj's failures that prove the command was never applied: it was refused before it
entered the log (queue full, no leader, a forwarded command reaching a node that no longer
leads, a refusal) or its entry was replaced by a new leader's. Every other failure
(``Timeout``, ``LEADER_CHANGED`` while a follower waited for the leader's answer,
``UNKNOWN_OUTCOME``) leaves it open: it may still be applied."""


def raft_failure(reason: object, what: str, commit_timeout_s: float) -> RaftQError:
    """The one mapping of a pysyncobj failure onto RaftQ's error codes, for every group;
    the codes' ``proves_nothing_done`` then tells every caller whether to retry elsewhere."""
    found = _NOTHING_DONE.get(reason)
    if found is not None:
        code, message = found
        return RaftQError(code, f"{what}: {message}; not applied")
    return RaftQError(
        ErrorCode.COMMIT_TIMEOUT,
        f"{what}: no commit within {commit_timeout_s} s ({reason}); the outcome is unknown, "
        "retry with the same sequence or request id",
    )


SENDERS_MEMBERS = "raftq_members"
"""The key, on a snapshot's last part, of the sender's members (old receivers ignore it)."""


class SnapshotTransport(TCPTransport):
    """pysyncobj's TCP transport; the last part of a snapshot carries the sending
    leader's members, its own address included (taken by the receiver's
    ``RaftNode._SyncObj__updateClusterConfiguration``)."""

    def send(self, node: Any, message: Any) -> bool:
        if isinstance(message, dict):
            part = message.get("serialized")
            if part is not None and part[2]:  # (data, is_first, is_last)
                message[SENDERS_MEMBERS] = self._syncObj.members_and_self()
        return bool(super().send(node, message))


class EntryParts:
    """A follower's view of the entries its leader sends in parts (module docstring): the
    parts so far, per sender (only a leader sends them, one entry at a time). Tick thread."""

    def __init__(self) -> None:
        self._parts: dict[Any, bytearray] = {}

    def received(self, node: Any, message: dict[str, Any]) -> dict[str, Any]:
        """The message for pysyncobj: a part as it came, a premature finish as one more part,
        and the true finish as a plain append of the whole entry."""
        kind = message.get("transmission")
        if kind == "start":
            self._parts[node] = bytearray(message["data"])
            return message
        parts = self._parts.get(node)
        if parts is None:
            return message  # its start went to pysyncobj before this node took over
        parts += message["data"]
        if kind != "finish":
            return message
        try:
            entry = pysyncobj_pickle.loads(bytes(parts))
        except (EOFError, pickle.UnpicklingError):
            return {**message, "transmission": "process"}  # truncated: more parts follow
        del self._parts[node]
        whole = {k: v for k, v in message.items() if k not in ("transmission", "data")}
        whole["entries"] = [entry]
        return whole


class RaftNode(SyncObj):
    _SyncObj__newAppendEntriesTime: float  # pysyncobj's: when the leader sends a heartbeat

    def __init__(
        self,
        self_node: str,
        partners: list[str],
        conf: SyncObjConf,
        consumers: list[Any],
        *,
        commit_notice_delay_s: float,
        transport: type[Transport] | None = None,
        loop: TickLoop | None = None,
    ) -> None:
        # Set before SyncObj.__init__: attributes set after it would be snapshotted.
        self._set_up_loop(loop, conf)
        self._journals: list[DurableFileJournal] = []
        self._commit_notice_delay_s = commit_notice_delay_s
        self._change_lock = threading.Lock()
        self._change_open_term: int | None = None
        """The term in which this node proposed a membership change not yet answered."""
        self._transfer_to: str | None = None
        """Set by a request thread, taken by the tick thread: pysyncobj's calls are not
        thread-safe (``transferLeadership`` sends on the tick thread's connections)."""
        self._senders_members: list[str] | None = None
        self._matched: tuple[int, int] = (0, 0)
        """(term, index): this log is known to match the leader of that term's through
        that index (``_stale_append``)."""
        """Tick thread: the members that came with the snapshot part being handled."""
        self._entry_parts = EntryParts()
        self._voters: tuple[int, set[Any]] = (0, set())
        """Tick thread: a term, and who voted for this node in it (``_repeated_vote``)."""
        frame_compression.install()  # small frames without a 256 KiB deflate state each
        # Entries, votes, dumps on disk before Raft acts; frames encrypted by FrameCipher.
        with durable_journal.installed(), frame_cipher.installed():
            try:
                super().__init__(
                    self_node,
                    partners,
                    conf,
                    consumers=consumers,
                    transportClass=transport or SnapshotTransport,
                )
            except SyncObjException as exc:
                # Raised as the constructor's last step (all else is set up): the port is
                # taken. The loop's ticks try again (pysyncobj's transport tick binds).
                if loop is None or exc.errorCode != "BindError":
                    raise
        self._finish_construction(conf)
        if loop is not None:
            loop.add(self)  # last: no tick, no callback of this node before this point

    def _set_up_loop(self, loop: TickLoop | None, conf: SyncObjConf) -> None:
        """Before pysyncobj's constructor: what ticks this node."""
        self._loop = loop
        """Ticks this node with the process's other nodes (``tick_loop``); None: pysyncobj's
        own tick thread (``conf.autoTick``) or the node's owner (``doTick``)."""
        self._node_poller: Any = NodePoller(loop) if loop is not None else None
        """``SyncObj._poller`` (the property below)."""
        self._closing = False
        self._closed = threading.Event()
        if loop is not None:
            if conf.autoTick:
                raise ValueError("a node on a TickLoop runs with autoTick off")
            # With autoTick off pysyncobj binds in its constructor, retrying until bound
            # (a busy loop, forever, with maxBindRetries 0): one try there, then every
            # bindRetryTime on the loop's ticks, as pysyncobj's own tick thread does.
            conf.maxBindRetries = 1

    def _finish_construction(self, conf: SyncObjConf) -> None:
        """After pysyncobj's constructor: callbacks, the dump's guard, the main-thread tie,
        the journal, the members."""
        self.addOnTickCallback(self._transfer_when_asked)
        dump = self._SyncObj__serializer
        if isinstance(dump, DumpWriter):  # it refuses a snapshot older than this state
            dump.applied_index = lambda: int(self._SyncObj__raftLastApplied)
        # pysyncobj's tick thread stops once the thread that built the node has ended. A
        # broker builds replicas on the HTTP connection thread of ``POST /partitions``, which
        # ends with its connection: tie the node to the process's main thread instead (it
        # serves until the process stops). A node on a TickLoop: the loop stops so.
        self._SyncObj__mainThread = threading.main_thread()
        journal = opened(conf.journalFile) if conf.journalFile else None
        if journal is not None:
            self._journals.append(journal)
        if not (conf.fullDumpFile and os.path.isfile(conf.fullDumpFile)):
            self._take_logged_members()  # else once the first tick loaded the dump

    # --- on a TickLoop (``tick_loop``) ----------------------------------------------------

    @property
    def _poller(self) -> Any:
        # pysyncobj's poller for every descriptor of the node: SyncObj.__init__ makes one
        # (``self._poller = createPoller(...)``) before its transport and PipeNotifier
        # subscribe through it; on a loop the node's NodePoller stands in for it.
        return self._node_poller

    @_poller.setter
    def _poller(self, made: Any) -> None:
        if self._node_poller is None:
            self._node_poller = made  # not on a loop: pysyncobj's own

    @property
    def poller(self) -> NodePoller:
        """The loop's view of this node's descriptors (on a loop only; pysyncobj's own
        poller otherwise). No check here: pysyncobj reads every attribute at its start."""
        poller: NodePoller = self._node_poller
        return poller

    def closing(self) -> bool:
        return self._closing

    def tick_once(self) -> None:
        """Loop thread: one pass of pysyncobj's timers, without waiting (the loop polls)."""
        self._onTick(0.0)

    def close_on_loop(self) -> None:
        """Loop thread: destroy the node (its sockets, journal, dump sends)."""
        try:
            self._doDestroy()
        finally:
            self._closed.set()

    def _SyncObj__updateClusterConfiguration(self, new_nodes: list[Any]) -> None:  # noqa: N802
        # pysyncobj calls this only to load a dump's members: at a start, and when a
        # snapshot from the leader arrives. Those stored in the dump are of when it was
        # taken; a leader that joined by a snapshot keeps that one as its dump until it
        # compacts, so they can be moves old and lack the leader itself. A new member took
        # them, dropped connections from the current members (pysyncobj's transport talks
        # only to members; the sender's connection came back only after pysyncobj's 5 s
        # reconnect pause) and, once leadership moved to one it did not list, followed no
        # one: a move that never finished (membership nemesis, seeds 101 and 501). A
        # snapshot's receiver takes the sender's members instead: its newest configuration,
        # committed or not, as Raft has a follower take one. The entries after the snapshot
        # repeat those changes, and applying one twice is a no-op.
        members = self._senders_members
        if members is not None:
            own = str(self._SyncObj__selfNode.id)
            new_nodes = [member for member in members if member != own]
        SyncObj._SyncObj__updateClusterConfiguration(self, new_nodes)

    def _take_logged_members(self) -> None:
        """At a start: the members are the newest configuration in the log, committed or
        not, as Raft requires (a follower takes a change when it appends it, and so does
        pysyncobj while running). pysyncobj instead starts from the dump's members plus the
        changes it replays, which stop at the commit index stored lazily with the term: a
        node restarted soon after two changes (a move: a member added, another removed)
        counted votes over the configuration from before both, where {old members} and
        {new members} can each be a majority. Applying a change twice is a no-op."""
        if not self._SyncObj__conf.dynamicMembershipChange:
            return
        applied = self._SyncObj__raftLastApplied
        try:
            entries = self._SyncObj__getEntries(applied + 1)
        except (IndexError, TypeError):  # an empty log: nothing was changed
            return
        for command, _index, _term in entries:
            change = self._SyncObj__parseChangeClusterRequest(command)
            if change is not None:
                self._SyncObj__doChangeCluster(change)

    @property
    def journal(self) -> DurableFileJournal | None:
        return self._journals[0] if self._journals else None

    def node_status(self) -> RaftStatus:
        raw: dict[str, Any] = self.getStatus()
        leader = raw.get("leader")
        return RaftStatus(
            role=_ROLES[raw["state"]],
            leader=None if leader is None else str(getattr(leader, "address", leader)),
            term=int(raw["raft_term"]),
            commit_index=int(raw["commit_idx"]),
            last_applied=int(raw["last_applied"]),
            has_quorum=bool(raw["has_quorum"]),
            partners=tuple(sorted(self.members())),
            log_entries=int(raw["log_len"]),
            uptime_s=int(raw["uptime"]),
        )

    def leads(self) -> bool:
        return bool(self._isLeader())

    def leader(self) -> str | None:
        """The Raft address of the leader this node last heard of."""
        leader = self._getLeader()
        return None if leader is None else str(leader.address)

    def wait_for_leader(self, wait_s: float, what: str) -> None:
        """Ride out an election in progress; 503 NO_LEADER when none ends within ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while self._getLeader() is None:
            if time.monotonic() >= deadline:
                raise RaftQError(
                    ErrorCode.NO_LEADER,
                    f"{what} has had no Raft leader for {wait_s} s (no majority of replicas?)",
                )
            time.sleep(_LEADER_POLL_S)

    def transfer_leadership(self, raft_address: str | None) -> None:
        """Any thread: if this node leads at its next tick, hand leadership to
        ``raft_address`` (None: to the connected member that holds the most, pysyncobj's
        choice). One request per tick; pysyncobj refuses unless the target has every entry."""
        self._transfer_to = raft_address or _ANY_MEMBER

    def _transfer_when_asked(self) -> None:
        """Tick thread: the transfer asked since the last tick, if this node leads."""
        target, self._transfer_to = self._transfer_to, None
        if target is None or not self._isLeader():
            return
        if target == _ANY_MEMBER:
            self.transferLeadership(None)
        elif target in self.members():
            self.transferLeadership(target)

    def members_and_self(self) -> list[str]:
        """Tick thread: this node's members, itself included, as Raft addresses."""
        others: Any = self._SyncObj__otherNodes
        return sorted({str(node.id) for node in others} | {str(self._SyncObj__selfNode.id)})

    def members(self) -> frozenset[str]:
        """The Raft addresses of the other members as this node's log has them (on the
        leader: the newest configuration, committed or not)."""
        others: Any = self._SyncObj__otherNodes
        return frozenset(str(node.address) for node in list(others))

    def change_member(self, address: str, *, add: bool, timeout_s: float) -> None:
        """Add or remove one member and wait until the change is committed. Raises
        ``RaftQError`` as ``raft_failure`` maps pysyncobj's failures, and NOT_LEADER
        (nothing done) while a change may still be open.

        pysyncobj's own one-change-at-a-time guard never engages (its change index is never
        set), and Raft's single-server changes are safe only one step apart, so the rule is
        kept here: a leader changes the members only once it has applied an entry of its
        term (so a change a previous leader left open is committed or gone: Raft's rule),
        and only when no change it proposed in this term is still waiting for its commit."""
        done = threading.Event()
        outcome: list[object] = []

        def answered(error: object) -> None:
            outcome.append(error)
            done.set()

        self.start_member_change(address, add=add, answered=answered)
        what = f"{'adding' if add else 'removing'} member {address}"
        if not done.wait(timeout_s):
            raise raft_failure("timeout", what, timeout_s)
        if outcome[0] != FAIL_REASON.SUCCESS:
            raise raft_failure(outcome[0], what, timeout_s)

    def start_member_change(
        self, address: str, *, add: bool, answered: Callable[[object], None]
    ) -> None:
        """``change_member`` without the wait: ``answered(reason)`` is called on the tick
        thread with pysyncobj's outcome (``FAIL_REASON.SUCCESS`` once committed). Raises
        NOT_LEADER (nothing done) as ``change_member``; the simulator calls it directly."""
        with self._change_lock:
            term = self._SyncObj__raftCurrentTerm
            if self._change_open_term == term or not self.caught_up():
                raise RaftQError(
                    ErrorCode.NOT_LEADER,
                    f"a membership change is still open in term {term}: not applied; retry "
                    "once it is committed",
                )
            self._change_open_term = term

        def callback(_result: object, error: object) -> None:
            self._change_open_term = None
            answered(error)

        if add:
            self.addNodeToCluster(address, callback)
        else:
            self.removeNodeFromCluster(address, callback)

    def _doDestroy(self) -> None:  # noqa: N802
        # The tick thread ends the node: close the dump's sends in progress too.
        SyncObj._doDestroy(self)
        dump = self._SyncObj__serializer
        if isinstance(dump, DumpWriter):
            dump.close_transmissions()
            dump.close_incoming()

    def destroy(self) -> None:
        """Any thread: close the node. On a loop, the loop destroys it at its next turn
        (woken now): pysyncobj's ``destroy`` with autoTick off would close the sockets and
        the journal on the calling thread, under the loop's feet."""
        loop = self._loop
        if loop is None:
            SyncObj.destroy(self)
            return
        self._closing = True
        loop.wake()

    def close(self, wait_s: float) -> None:
        """``destroy`` and wait (bounded) until the tick thread (or the loop) has closed
        the sockets and the journal (``destroy`` alone only asks it to, at its next tick).
        On the loop's own thread it cannot wait: the loop closes it after this turn."""
        self.destroy()
        loop = self._loop
        if loop is not None:
            if not loop.on_loop():
                self._closed.wait(wait_s)
            return
        thread = self._SyncObj__thread
        if thread is not None:
            thread.join(wait_s)

    def caught_up(self) -> bool:
        """This node knows the leader of its current term (itself included) and has
        applied an entry of that term, so its state holds every entry committed before the
        term (a leader commits one at the start of its term, its no-op, and that commits
        everything before it; a follower lags only by what this term's leader added since).
        Until then, after a restart of every node or an election, each replica holds only
        what it had applied, and all of them may agree on a stale state: reads must wait
        (found by the power-loss test: 0.5 s of empty fetches after a restart). The known
        leader matters after a restart: the term is restored from disk and the dump's last
        entry is often of that term, but the entries committed after the dump are applied
        only once a leader says they are committed (pinned with files written before the
        replication layer: ``unit_tests/broker/test_partition_raft.py``). On a leader this
        is the managers' old test, "its no-op is applied"."""
        if self._getLeader() is None:
            return False
        try:
            applied = self._SyncObj__getEntries(self._SyncObj__raftLastApplied, 1)
        except (IndexError, TypeError):  # the log is being replaced by a snapshot
            return False
        term = self._SyncObj__raftCurrentTerm
        # Term 0: it never heard of a leader, so others may have committed what it lacks.
        return term > 0 and bool(applied) and applied[0][2] == term

    def applying_entry(self) -> tuple[int, int]:
        """Inside an apply (tick thread): the Raft index and the node's current term of the
        entry being applied (pysyncobj counts it as applied only after the call)."""
        return self._SyncObj__raftLastApplied + 1, self._SyncObj__raftCurrentTerm

    def replicas_holding(self, index: int) -> int:
        """On the leader: the replicas (itself included) known to hold the log up to
        ``index`` (their acknowledged match index); 0 elsewhere."""
        if not self._isLeader():
            return 0
        matched: dict[Any, int] = self._SyncObj__raftMatchIndex
        return 1 + sum(1 for found in list(matched.values()) if found >= index)

    def replicas_answering(self, within_s: float) -> int:
        """On the leader: the replicas (itself included) that really answered it in its
        term, the last time within ``within_s`` seconds (pysyncobj's own clock, as its
        quorum check); 0 elsewhere.

        pysyncobj's "last answered" stamps alone do not say that: a new leader stamps every
        member "just now", so does a leader adding a member, and a removed member keeps its
        stamp. A member counts only while it is a member, its stamp is recent, and its
        match index moved in this term (pysyncobj sets it to 0 at an election and at an
        add, and only an accepted append moves it)."""
        if not self._isLeader():
            return 0
        answered: dict[Any, float] = self._SyncObj__lastResponseTime
        matched: dict[Any, int] = self._SyncObj__raftMatchIndex
        since = monotonic_time() - within_s
        members = list(self._SyncObj__otherNodes)
        return 1 + sum(
            1 for n in members if matched.get(n, 0) > 0 and answered.get(n, 0.0) >= since
        )

    def member_holds(self, address: str, index: int) -> bool:
        """On the leader: the member at ``address`` acknowledged the log up to ``index``
        (its match index; an add starts it at 0). False elsewhere."""
        if not self._isLeader():
            return False
        matched: dict[Any, int] = self._SyncObj__raftMatchIndex
        return any(str(n.address) == address and i >= index for n, i in list(matched.items()))

    def leave_unsynced(self, consumer: object, names: frozenset[str]) -> None:
        """Entries that call ``consumer``'s replicated methods ``names`` (``name_vN``, as
        pysyncobj numbers them) are not synced when appended to this node's journal (a
        later sync covers them)."""
        ids = {
            method_id
            for key, method_id in self._methodToID.items()
            if isinstance(key, tuple) and key[0] == id(consumer) and key[1] in names
        }
        journal = self.journal
        if journal is not None and ids:
            journal.skip_sync = lambda command: called_method(command) in ids

    def _SyncObj__onMessageReceived(self, node: Any, message: dict[str, Any]) -> None:  # noqa: N802
        # pysyncobj binds its transport to this name in SyncObj.__init__, so this override
        # sees every message first.
        if message.get("transmission") is not None:
            # An entry sent in parts: whole before anything looks at it (``EntryParts``).
            message = self._entry_parts.received(node, message)
        if self._stale_append(message):
            return  # as if the network had lost it: the leader has sent newer ones
        if self._repeated_vote(node, message):
            return
        next_index: dict[Any, int] = self._SyncObj__raftNextIndex
        before = next_index.get(node)
        if message.get("type") == "append_entries" and message.get("serialized") is not None:
            # A part of a snapshot says nothing about this node's log, but pysyncobj still
            # moves its commit index to min(the leader's, its last index) on it: a follower
            # that lagged behind the leader's dump with entries of an old term not yet
            # overwritten committed and applied them (simulator, in-order network, seed 11:
            # commit 1 -> 25 over entries of term 1 the group had replaced in term 2). The
            # snapshot, once whole, sets the commit index itself.
            committed = self._SyncObj__raftCommitIndex
            message["commit_index"] = min(int(message.get("commit_index", 0)), committed)
        self._senders_members = message.get(SENDERS_MEMBERS)
        try:
            SyncObj._SyncObj__onMessageReceived(self, node, message)
        finally:
            self._senders_members = None
        self._note_matched(message)
        if (
            message.get("type") == "next_node_idx"
            and message.get("success")
            and not message.get("reset")
            and before is not None
            and next_index.get(node, before) < before
        ):
            next_index[node] = before

    def _stale_append(self, message: dict[str, Any]) -> bool:
        """A late or repeated copy of an append this node already took from its term's
        leader. pysyncobj deletes every entry after an append's before it answers success
        (Raft deletes only entries that conflict), and its leader, whose match index only
        grows, kept counting the deleted entries as held: an acknowledgement claimed
        replicas that no longer had its entry, and a committed entry could be left on a
        minority (simulator: nearly every seed with reordering or duplicates). Such a copy
        is dropped, as if the network had lost it: it covers only entries up to
        ``_matched`` (through which this log is known to be this term's leader's)."""
        if message.get("type") != "append_entries" or "prevLogIdx" not in message:
            return False
        if "transmission" in message:
            return False
        term = self._SyncObj__raftCurrentTerm
        if message.get("term") != term or self._matched[0] != term:
            return False
        last = _last_covered(message)
        if last is None or last[0] > self._matched[1]:
            return False
        # Only a copy that would delete something: one covering this log's end is a
        # heartbeat, which keeps this node from standing for election (dropping those cost
        # elections every few seconds: membership profile seeds 1 and 11).
        held = self._SyncObj__getEntries(last[0], 2)
        return len(held) == 2 and held[0][2] == last[1]

    def _repeated_vote(self, node: Any, message: dict[str, Any]) -> bool:
        """A second copy of a member's vote for this node in this term. pysyncobj counts
        vote messages, not voters: a vote the network duplicated made a candidate with 2
        of 4 votes the leader of a term another member also won (simulator, faulty network,
        seed 629: two leaders in term 4). Over TCP a vote is never repeated; the first copy
        counts, the rest are dropped."""
        term = int(self._SyncObj__raftCurrentTerm)
        if message.get("type") != "response_vote" or message.get("term") != term:
            return False  # pysyncobj counts only votes of its current term
        if self._voters[0] != term:
            self._voters = (term, set())
        voters = self._voters[1]
        if node in voters:
            return True
        voters.add(node)
        return False

    def _note_matched(self, message: dict[str, Any]) -> None:
        """After pysyncobj took an append: this log matches the leader's through its last
        entry, if it holds that entry now (else it was refused)."""
        term = self._SyncObj__raftCurrentTerm
        if message.get("type") != "append_entries" or message.get("term") != term:
            return
        if "prevLogIdx" not in message or "transmission" in message:
            # A part of a snapshot. Once installed as the whole log (its last two entries),
            # the log matches the leader's through them (a snapshot is committed state);
            # otherwise the entries known to match are still there (a part in transit, or
            # a late snapshot whose last entry the log held: kept from it). Resetting here
            # let a late append truncate a member's acknowledged entries after a repeated
            # snapshot (faulty network, seed 4007 at 1,500 steps).
            log = self._SyncObj__raftLog
            if len(log) == 2 and log[-1][1] == self._SyncObj__raftLastApplied:
                self._matched = (term, int(log[-1][1]))
            return
        last = _last_covered(message)
        if last is None:
            return
        held = self._SyncObj__getEntries(last[0], 1)
        if held and held[0][2] == last[1]:
            known = self._matched[1] if self._matched[0] == term else 0
            self._matched = (term, max(known, last[0]))

    def _SyncObj__sendNextNodeIdx(  # noqa: N802
        self,
        node: Any,
        reset: bool = False,
        nextNodeIdx: int | None = None,  # noqa: N803 (pysyncobj's names: it passes them so)
        success: bool = False,
    ) -> None:
        # The follower's answer to its leader: where its log is known to match the leader's.
        applied = int(self._SyncObj__raftLastApplied)
        if success and nextNodeIdx is None:
            # A snapshot installed (pysyncobj's only success answer without an index): it
            # answered its log's end, but a log that held the snapshot's last entry keeps
            # the entries after it (``_SyncObj__loadDumpFile``, Raft's rule), which may be
            # of an old term the leader replaced; the leader counted them as held (membership
            # profile, seed 24: a member of five claimed 29-32 of term 3, and an entry was
            # acknowledged as synced on 3 replicas where 2 held it). Raft's answer: the
            # snapshot's last entry, which is the last applied now.
            nextNodeIdx = applied + 1  # noqa: N806
        elif reset and not success and nextNodeIdx is not None:
            # An append refused because its previous entry is here with another term:
            # pysyncobj answers that entry's index, so its leader backed up one entry per
            # round trip, and the leader's next send of new entries (pysyncobj moves the
            # next index to its log's end at every send) drew a refusal near the end that
            # undid it: under steady proposals a follower with a diverged tail never caught
            # up, and every new term (a new leader) started it again. Its committed and
            # applied entries are every later leader's (Raft's leader completeness), so the
            # follower names the one after them instead: the leader's next append matches
            # there (or it sends its snapshot). Simulator, seed 5079: a deposed leader held
            # 29 entries of its old term, among them the add of a node the group never took,
            # which kept asking it for votes; each of its terms made it deaf to the leader
            # and then stand for election, and it never caught up (no leader at the end).
            committed = max(int(self._SyncObj__raftCommitIndex), applied)
            nextNodeIdx = min(nextNodeIdx, committed + 1)  # noqa: N806
        SyncObj._SyncObj__sendNextNodeIdx(
            self, node, reset=reset, nextNodeIdx=nextNodeIdx, success=success
        )

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:  # noqa: N802
        # pysyncobj applies a membership change again when its entry is applied, "required
        # only after node restarts". Here a node already holds the newest members from its
        # log (``_take_logged_members``, and pysyncobj's own change at append), so replaying
        # a batch of old changes removed members and added them back on a leader, which
        # zeroed their match indexes: an entry acknowledged in that tick counted 1 replica
        # where 2 held it (simulator, membership profile seed 11: a restarted leader
        # applying entries 2 to 36 at once).
        if self._SyncObj__parseChangeClusterRequest(command) is not None:
            return None
        return SyncObj._SyncObj__doApplyCommand(self, command)

    def _SyncObj__applyLogEntries(self) -> bool:  # noqa: N802
        # pysyncobj (without batching) asks for an AppendEntries to every follower right
        # after each apply, only to carry the new commit index: a second round of messages
        # per commit (and the followers' answers to it), on the leader's tick thread at the
        # moment the proposer's thread wakes. Under load the next entry carries the index a
        # moment later anyway, so the notice waits ``commit_notice_delay_s`` (sent with
        # whatever goes first: an entry, or this heartbeat at the next tick after it).
        if SyncObj._SyncObj__applyLogEntries(self):
            notice_s = monotonic_time() + self._commit_notice_delay_s
            self._SyncObj__newAppendEntriesTime = min(self._SyncObj__newAppendEntriesTime, notice_s)
        return False

    def _checkCommandsToApply(self) -> None:  # noqa: N802
        # A leader appends each proposed entry to its journal and sends it to the followers;
        # pysyncobj syncs it before sending, so the followers' own syncs came after the
        # leader's. Raft allows the leader to sync in parallel with replication as long as
        # it counts itself toward a commit only once synced (thesis 10.2.1): the entries
        # appended here are sent first and synced at the end of this call, and this thread
        # computes commits only in a later tick.
        journal = self.journal
        if journal is None or not self._isLeader():
            SyncObj._checkCommandsToApply(self)
            return
        journal.defer_syncs = True
        try:
            SyncObj._checkCommandsToApply(self)
        finally:
            journal.defer_syncs = False
            journal.sync_deferred()

    def _SyncObj__loadDumpFile(self, clearJournal: bool) -> None:  # noqa: N802, N803
        # Called by pysyncobj on the first tick after a start (clearJournal False) and when a
        # snapshot from the leader has arrived (True: pysyncobj's leader resends from it).
        # Either way Raft's rule holds: when the log holds the dump's last entry, only what
        # precedes it goes. pysyncobj cleared the log for every snapshot from the leader,
        # also a late or repeated one older than the entries the node had taken and
        # acknowledged since: the leader went on counting them (simulator, seed 19 with
        # reordering: a new member at index 4 again after acknowledging up to 26).
        journal = self.journal
        dump = self._SyncObj__serializer
        if journal is not None and isinstance(dump, DumpWriter):
            try:
                data = dump.peek()
            except Exception:  # pysyncobj reads it again and reports the failure
                data = None
            if data is not None and journal.keep_from(data[2], data[1]):
                clearJournal = False  # noqa: N806 (pysyncobj's name)
        SyncObj._SyncObj__loadDumpFile(self, clearJournal)
        if not clearJournal:
            self._take_logged_members()
        # Loading a big dump holds the tick thread (0.2 s at 240k messages here); a follower
        # whose election timer ran out meanwhile would stand for election right after,
        # although it has just heard from the leader (seen: term 1 -> 4 when a replica that
        # had been down caught up from a snapshot). Count the timeout from now.
        self._SyncObj__raftElectionDeadline = (
            monotonic_time() + self._SyncObj__generateRaftTimeout()
        )


def _last_covered(message: dict[str, Any]) -> tuple[int, int] | None:
    """The index and term of the last entry an append covers (its previous entry, when it
    carries none); None when the leader did not know that term (pysyncobj sends None)."""
    entries = message.get("entries") or []
    index, term = (
        (entries[-1][1], entries[-1][2])
        if entries
        else (
            message.get("prevLogIdx"),
            message.get("prevLogTerm"),
        )
    )
    if not isinstance(index, int) or not isinstance(term, int):
        return None
    return index, term


_REGULAR_COMMAND = 0
"""pysyncobj's ``_COMMAND_TYPE.REGULAR``: the first byte of a replicated method call's entry."""
_PROTOCOL_2 = b"\x80\x02"
_BININT1 = b"K"
_BININT2 = b"M"


def called_method(command: bytes, ops_max: int = 4) -> int | None:
    """The replicated method id an entry calls, or ``None`` when it is not such an entry
    (no-op, membership) or not readable. The entry is the type byte and a pickled
    ``(method_id, args[, kwargs])``: the id is the pickle's first integer, after its
    protocol and frame opcodes, read without unpickling the (large) arguments."""
    if not command or command[0] != _REGULAR_COMMAND:
        return None
    # pysyncobj pickles with protocol 2, so the id is the opcode right after the header;
    # read it directly (it is asked of every entry appended, on every replica). Anything
    # else goes the general way.
    if command[1:3] == _PROTOCOL_2:
        if command[3:4] == _BININT1 and len(command) > 4:
            return command[4]
        if command[3:4] == _BININT2 and len(command) > 5:
            return int.from_bytes(command[4:6], "little")
    try:
        for opcode, argument, _ in _first_ops(command[1:], ops_max):
            if opcode.name in ("BININT1", "BININT2", "BININT", "LONG1"):
                return int(argument)
    except Exception:  # not a pickle we can read: treated as any other entry (synced)
        return None
    return None


def _first_ops(data: bytes, count: int) -> list[tuple[Any, Any, Any]]:
    found = []
    for op in pickletools.genops(io.BytesIO(data)):
        found.append(op)
        if len(found) == count:
            break
    return found
