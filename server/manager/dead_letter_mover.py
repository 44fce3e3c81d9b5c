"""``DeadLetterMover``: the dead-letter step of consumer groups, run by the manager leader's
duties each reconcile round (``protocol/dead_letters.py`` has the step and why a repeat
stores one copy).

Each round it asks every live broker for the dead letters of the partitions it leads, and
for each group and partition: produces them to the group's dead-letter topic one at a
time, in the order they died, each under the group's dead-letter producer id with its dead
sequence; stops at the first that fails (the rest wait for the next round, so the
sequences reach each dead-letter partition in order); then marks those stored as
dead-lettered at the partition leader. A group without a dead-letter topic keeps its dead
messages parked in the partition. Thread: the leader-duties thread.
"""

from __future__ import annotations

import logging
from itertools import groupby

from manager.broker_client import BrokerClient, BrokerRefusalError
from manager.log_router import LogRouter, error_code
from manager.raft import RegistryMachine
from protocol.dead_letters import PendingDeadLetter, dead_letter_producer_id
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import MarkDeadLettered
from protocol.limits import Limits
from protocol.requests import Produce
from protocol.types import Offset, ProducerId

_log = logging.getLogger(__name__)


class DeadLetterMover:
    def __init__(
        self, limits: Limits, raft: RegistryMachine, brokers: BrokerClient, router: LogRouter
    ) -> None:
        self._limits = limits
        self._raft = raft
        self._brokers = brokers
        self._router = router

    def tick(self) -> None:
        brokers = self._raft.read(lambda s: s.brokers.all())
        for broker in brokers:
            if not broker.alive:
                continue
            try:
                pending = self._brokers.dead_letters(
                    broker.address, self._limits.dead_letter_batch_max
                )
            except RaftQError as exc:
                _log.warning("dead letters of broker %s not read: %s", broker.broker_id, exc)
                continue
            for _, letters in groupby(pending, key=_source):
                self._move(broker.address, list(letters))

    def _move(self, address: str, letters: list[PendingDeadLetter]) -> None:
        """One group's dead letters from one partition (its leader at ``address``)."""
        first = letters[0]
        entry = self._raft.read(lambda s: s.groups.get(first.topic, first.group))
        if entry is None or entry.dead_letter_topic is None:
            return  # parked: a group without a dead-letter topic keeps them
        stored: list[Offset] = []
        for letter in sorted(letters, key=lambda d: d.sequence):
            if not self._produce(entry.dead_letter_topic, letter):
                break
            stored.append(letter.message.offset)
        if not stored:
            return
        mark = MarkDeadLettered(first.topic, first.partition_id, first.group, tuple(stored))
        try:
            self._brokers.mark_dead_lettered(address, mark)
        except RaftQError as exc:
            # The copies are stored: the next round produces them again, recognised.
            _log.warning("dead letters %s not marked yet: %s", mark, exc)

    def _produce(self, dead_letter_topic: str, letter: PendingDeadLetter) -> bool:
        """Whether the dead-letter topic holds the letter's copy now."""
        producer_id = dead_letter_producer_id(letter.topic, letter.partition_id, letter.group)
        request = Produce(
            topic=dead_letter_topic,
            partition_id=None,
            messages=(letter.copy(),),
            is_batch=False,
            producer_id=ProducerId(producer_id),
            sequence=letter.sequence,
        )
        try:
            self._router.produce_unregistered(request)
        except (RaftQError, BrokerRefusalError) as exc:
            if error_code(exc) is ErrorCode.SEQUENCE_OUT_OF_ORDER:
                return True  # a later letter was stored, so this one was before it
            _log.warning("dead letter of %s/%s not stored: %s", letter.topic, letter.group, exc)
            return False
        return True


def _source(letter: PendingDeadLetter) -> tuple[str, int, str]:
    return (letter.topic, letter.partition_id, letter.group)
