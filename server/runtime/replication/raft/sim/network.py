"""The simulated network: every message between the nodes of a simulated group goes
through one ``SimNetwork``, which delays, drops, duplicates and reorders them and cuts the
group into sides, all from the run's seed.

Determinism does not depend on the order pysyncobj sends in (it iterates sets of nodes,
whose order follows Python's string hashing, which differs between processes): each
directed link draws its messages' fates from a random stream of its own, seeded from the run's
seed and the two addresses, and messages are delivered ordered by (time, link, sequence on the
link).

Like pysyncobj's TCP transport, a node takes messages only from the members it knows (its
transport refuses other connections), and each message is pickled on send and unpickled on
delivery (no object is shared between nodes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import pickle
import random
from dataclasses import dataclass, field
from typing import Any

from pysyncobj.node import TCPNode
from pysyncobj.transport import Transport

from runtime.replication.raft.node import SENDERS_MEMBERS


def seeded_random(*parts: object) -> random.Random:
    """A random stream seeded from ``parts`` by SHA-256 (never by ``hash()``, which differs
    between processes for strings)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass(frozen=True, slots=True)
class NetworkFaults:
    """How unkind the network is; probabilities per message, delays in virtual seconds."""

    delay_s_min: float = 0.001
    delay_s_max: float = 0.030
    drop_probability: float = 0.02
    duplicate_probability: float = 0.02
    reorder_delay_s_max: float = 0.100
    """A reordered message is held this much longer at most (later ones overtake it)."""
    reorder_probability: float = 0.05
    in_order: bool = False
    """True: each link delivers in the order sent, as one TCP connection does (what
    pysyncobj assumes); duplicates and reordering then never happen."""


@dataclass(order=True, slots=True)
class _InFlight:
    deliver_at_s: float
    source: str
    target: str
    sequence: int
    payload: bytes = field(compare=False)


class SimNetwork:
    """Messages in flight between the simulated nodes, and which node can reach which."""

    def __init__(self, seed: int, faults: NetworkFaults) -> None:
        self._seed = seed
        self._faults = faults
        self._in_flight: list[_InFlight] = []
        self._links: dict[tuple[str, str], random.Random] = {}
        self._sequences: dict[tuple[str, str], int] = {}
        self._last_due_s: dict[tuple[str, str], float] = {}
        self._sides: dict[str, int] = {}
        """Partition: a node's side (absent: side 0). Messages cross no side boundary."""
        self._transports: dict[str, SimTransport] = {}
        self.now_s = 0.0
        self.sent = 0
        self.dropped = 0
        self.delivered = 0

    # --- the scheduler's levers ------------------------------------------------------

    def partition(self, sides: dict[str, int]) -> None:
        """Cut the network: a message passes only between nodes on the same side (a node
        not named is on side 0). In-flight messages across the cut are lost when due."""
        self._sides = dict(sides)

    def heal(self) -> None:
        self._sides = {}

    def quiet(self) -> None:
        """No more drops, duplicates or reordering from now on (delays stay)."""
        self._faults = dataclasses.replace(
            self._faults, drop_probability=0.0, duplicate_probability=0.0, reorder_probability=0.0
        )

    def reachable(self, source: str, target: str) -> bool:
        return self._sides.get(source, 0) == self._sides.get(target, 0)

    # --- pysyncobj's side -----------------------------------------------------------------

    def attach(self, transport: SimTransport) -> None:
        self._transports[transport.address] = transport

    def detach(self, address: str) -> None:
        """A crashed or stopped node: what is in flight to it is lost."""
        self._transports.pop(address, None)
        self._in_flight = [m for m in self._in_flight if m.target != address]
        heapq.heapify(self._in_flight)

    def send(self, source: str, target: str, message: object) -> None:
        self.sent += 1
        link = (source, target)
        rng = self._links.get(link)
        if rng is None:
            rng = self._links[link] = seeded_random(self._seed, "link", source, target)
        faults = self._faults
        if rng.random() < faults.drop_probability:
            self.dropped += 1
            return
        duplicated = rng.random() < faults.duplicate_probability and not faults.in_order
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        for _ in range(2 if duplicated else 1):
            delay_s = rng.uniform(faults.delay_s_min, faults.delay_s_max)
            if rng.random() < faults.reorder_probability and not faults.in_order:
                delay_s += rng.uniform(0.0, faults.reorder_delay_s_max)
            deliver_at_s = self.now_s + delay_s
            if faults.in_order:  # never before the link's previous message
                deliver_at_s = max(deliver_at_s, self._last_due_s.get(link, 0.0))
                self._last_due_s[link] = deliver_at_s
            sequence = self._sequences.get(link, 0)
            self._sequences[link] = sequence + 1
            flight = _InFlight(deliver_at_s, source, target, sequence, payload)
            heapq.heappush(self._in_flight, flight)

    def due(self) -> list[tuple[str, str, object]]:
        """Take every message due by ``now_s`` that can still arrive: (source, target,
        message), in delivery order."""
        found: list[tuple[str, str, object]] = []
        while self._in_flight and self._in_flight[0].deliver_at_s <= self.now_s:
            flight = heapq.heappop(self._in_flight)
            if flight.target not in self._transports or not self.reachable(
                flight.source, flight.target
            ):
                self.dropped += 1
                continue
            found.append((flight.source, flight.target, pickle.loads(flight.payload)))
        return found

    def deliver(self, source: str, target: str, message: object) -> bool:
        """Hand one message to its target's node (in that node's tick context)."""
        transport = self._transports.get(target)
        if transport is None:
            return False
        self.delivered += 1
        return transport.receive(source, message)

    def in_flight(self) -> int:
        return len(self._in_flight)


class SimTransport(Transport):
    """pysyncobj's transport for a simulated node: sends go to the ``SimNetwork`` of the
    class (``transport_class``); every member counts as connected (pysyncobj starts
    elections only when connected to someone)."""

    network: SimNetwork

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:  # noqa: N803
        super().__init__(syncObj, selfNode, otherNodes)
        self._syncObj = syncObj
        self.address = str(selfNode.id)
        self._nodes: dict[str, Any] = {str(node.id): node for node in otherNodes}
        self.network.attach(self)

    _ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    def tryGetReady(self) -> None:  # noqa: N802 (pysyncobj's name)
        # Called by the first tick (pysyncobj has set its callbacks by then).
        for node in list(self._nodes.values()):
            self._onNodeConnected(node)
        self._ready = True

    def addNode(self, node: Any) -> None:  # noqa: N802
        self._nodes[str(node.id)] = node
        self._onNodeConnected(node)

    def dropNode(self, node: Any) -> None:  # noqa: N802
        self._nodes.pop(str(node.id), None)
        self._onNodeDisconnected(node)

    def send(self, node: Any, message: Any) -> bool:
        if isinstance(message, dict):
            part = message.get("serialized")
            if part is not None and part[2]:  # as SnapshotTransport: the last part
                message[SENDERS_MEMBERS] = self._syncObj.members_and_self()
        self.network.send(self.address, str(node.id), message)
        return True

    def receive(self, source: str, message: object) -> bool:
        node = self._nodes.get(source)
        if node is None:
            return False  # pysyncobj's transport refuses a connection from a non-member
        self._onMessageReceived(node, message)
        return True

    def destroy(self) -> None:
        self.network.detach(self.address)


def transport_class(network: SimNetwork) -> type[SimTransport]:
    """A ``SimTransport`` class bound to ``network`` (pysyncobj builds its transport from
    a class and the node's addresses only)."""
    return type("BoundSimTransport", (SimTransport,), {"network": network})


def node_for(address: str) -> TCPNode:
    return TCPNode(address)
