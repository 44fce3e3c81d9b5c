"""``LeaderDuties``: the background thread that works only while this manager leads.

Every ``broker_poll_period_s`` it polls each registered broker's ``GET /partitions`` (the
heartbeat, and who leads each partition) into the ``BrokerMonitor``, and proposes
``set_broker_alive`` only when a broker's liveness changes. Every ``reconcile_period_s`` it
resumes half-done topic operations, forgets client registrations whose lease ran out
(``client_idle_expiry_s``) and moves the replicas of brokers dead for good
(``ReplicaMover``), and moves dead letters to their groups' dead-letter topics
(``DeadLetterMover``). Every ``leader_balance_period_s`` it asks for one leadership
transfer when brokers lead unevenly (``leader_balance``). Its side effects are idempotent,
so two managers that briefly both believe they lead do no harm.

Thread: one daemon thread per manager process, started by ``create_app``.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Executor

from manager.broker_client import BrokerClient
from manager.broker_monitor import BrokerMonitor
from manager.dead_letter_mover import DeadLetterMover
from manager.leader_balance import Placed, next_transfer
from manager.raft import RegistryMachine, leads
from manager.registry.brokers import BrokerRecord
from manager.registry.commands import SetBrokerAlive
from manager.registry.topics import PartitionState
from manager.replica_mover import ReplicaMover
from manager.services import ManagerServices
from protocol.errors import RaftQError
from protocol.limits import Limits

_log = logging.getLogger(__name__)


class LeaderDuties:
    def __init__(
        self,
        limits: Limits,
        raft: RegistryMachine,
        service: ManagerServices,
        brokers: BrokerClient,
        monitor: BrokerMonitor,
        poll_executor: Executor,
        mover: ReplicaMover,
        dead_letters: DeadLetterMover,
    ) -> None:
        self._limits = limits
        self._raft = raft
        self._service = service
        self._brokers = brokers
        self._monitor = monitor
        self._poll_executor = poll_executor
        self._mover = mover
        self._dead_letters = dead_letters
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-duties", daemon=True)
        self._was_leader = False
        self._next_reconcile_s = 0.0
        self._next_balance_s = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._limits.broker_poll_period_s):
            try:
                self._tick()
            except Exception:  # the thread must outlive any one bad round
                _log.exception("leader duties round failed")

    def _tick(self) -> None:
        if not leads(self._raft):
            self._was_leader = False
            return
        brokers = self._raft.read(lambda s: s.brokers.all())
        now_s = time.monotonic()
        if not self._was_leader:
            self._was_leader = True
            self._monitor.start_grace((b.broker_id for b in brokers), now_s)
            self._next_reconcile_s = now_s
        self._poll(brokers)
        if time.monotonic() >= self._next_reconcile_s:
            self._service.topics.resume_pending()
            self._service.clients.expire_idle_clients()
            self._move_replicas()
            self._move_dead_letters()
            self._next_reconcile_s = time.monotonic() + self._limits.reconcile_period_s
        if time.monotonic() >= self._next_balance_s:
            self._balance_leaders(brokers)
            self._next_balance_s = time.monotonic() + self._limits.leader_balance_period_s

    def _move_replicas(self) -> None:
        # A failed round of moves must not stop leader balancing after it.
        try:
            self._mover.tick()
        except Exception:
            _log.exception("a round of replica moves failed (retried next round)")

    def _move_dead_letters(self) -> None:
        try:
            self._dead_letters.tick()
        except Exception:
            _log.exception("a round of dead letters failed (retried next round)")

    def _balance_leaders(self, brokers: list[BrokerRecord]) -> None:
        topics = self._raft.read(lambda s: s.topics.all())
        placed = [
            Placed(
                topic.name,
                partition.partition_id,
                self._monitor.leader_of(topic.name, partition.partition_id),
                {r.broker_id: r.raft_address for r in partition.replicas},
            )
            for topic in topics
            for partition in topic.partitions
            if partition.state is PartitionState.ACTIVE
        ]
        leaders = (b.broker_id for b in brokers if b.alive and not b.draining)
        transfer = next_transfer(placed, leaders)
        if transfer is None:
            return
        address = next(b.address for b in brokers if b.broker_id == transfer.from_broker)
        try:
            self._brokers.transfer_leadership(
                address, transfer.topic, transfer.partition_id, transfer.to_raft_address
            )
            _log.info("asked %s to lead on broker %s", transfer, transfer.to_broker)
        except RaftQError as exc:
            _log.warning("leader balance: %s not asked: %s", transfer, exc.message)

    def _poll(self, brokers: list[BrokerRecord]) -> None:
        futures = [(b, self._poll_executor.submit(self._poll_one, b)) for b in brokers]
        for broker, future in futures:
            answered = future.result()
            dead = not answered and self._monitor.is_dead(broker.broker_id, time.monotonic())
            if answered and not broker.alive:
                self._set_alive(broker, True)
            elif dead and broker.alive:
                self._set_alive(broker, False)

    def _poll_one(self, broker: BrokerRecord) -> bool:
        try:
            partitions = self._brokers.hosted_partitions(broker.address)
        except RaftQError:
            self._monitor.record_silence(broker.broker_id, time.monotonic())
            return False
        self._monitor.record_answer(broker.broker_id, partitions, time.monotonic())
        return True

    def _set_alive(self, broker: BrokerRecord, alive: bool) -> None:
        try:
            self._raft.propose(SetBrokerAlive(broker.broker_id, alive))
            _log.warning("broker %s is %s", broker.broker_id, "alive" if alive else "dead")
        except RaftQError as exc:
            _log.warning("could not record broker %s liveness: %s", broker.broker_id, exc.message)
