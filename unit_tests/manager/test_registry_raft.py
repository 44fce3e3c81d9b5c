"""The managers' registry on a real (single-node) pysyncobj group (``registry_raft``): the
Raft files written before the replication layer replay to the same registry, and a manager
leads only once caught up."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from manager.config import ManagerConfig, Peer
from manager.raft import leads, registry_raft
from manager.registry.commands import RegisterProducer
from manager.registry.outcome import Outcome
from protocol.limits import Limits
from unit_tests.ports import port_block

WAIT_S = 15.0
LEGACY_FILES = Path(__file__).parent.parent / "legacy_raft_files"


@pytest.mark.parametrize("kind", ["journal", "dump"])
def test_raft_files_written_before_the_replication_layer_replay_to_the_same_registry(
    tmp_path: Path, kind: str
) -> None:
    """Legacy single commands (``register_broker``, ``set_broker_alive``,
    ``upsert_producer``), ``write_command``, and a full dump with an entry after it."""
    directory = tmp_path / "manager"
    shutil.copytree(LEGACY_FILES / f"manager-{kind}", directory)
    raft_port = port_block("legacy_raft_files")[1]  # the dump records the node's address
    port = port_block("legacy_raft_files")[2]
    peer = Peer(1, f"http://127.0.0.1:{port}", f"127.0.0.1:{raft_port}")
    config = ManagerConfig(1, "127.0.0.1", port, raft_port, (peer,), directory, "s", Limits())
    raft = registry_raft(config)
    try:
        deadline = time.monotonic() + WAIT_S
        while not leads(raft):
            assert time.monotonic() < deadline, "the restarted manager elects itself"
            time.sleep(0.02)
        brokers, topics, producers = raft.read(
            lambda s: (
                {b.broker_id: b.alive for b in s.brokers.all()},
                [t.name for t in s.topics.all()],
                [p for p in ("p-legacy", "p-new", "p-none") if s.clients.producer(p)],
            )
        )
        assert (brokers, topics, producers) == ({1: True, 2: False}, ["t"], ["p-legacy", "p-new"])
        assert raft.propose(RegisterProducer("p-later", "t", 10, 3_000, 60_000)) is Outcome.CREATED
    finally:
        raft.stop(WAIT_S)
