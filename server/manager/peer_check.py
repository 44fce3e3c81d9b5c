"""At start: this manager's peer list against those of the managers that answer.

Managers started from files whose ``[[peers]]`` differ could each count a different majority
(issue 11): a manager refuses to start when a running peer lists other managers than it does.
A peer that does not answer yet is skipped: it makes the same check when it starts. Once
managers were added or removed (``raftq manager add|remove``), a running peer's list is the
cluster's today and an older file may lag it: then it is enough that the peer lists this
manager as this file does. A manager that no answering peer lists, while each lists
exactly the others of its file, is one being added (``raftq manager add``): it starts and
waits (``manager.joining``). One attempt per peer (the caller's client makes one), bounded
by ``manager_peer_check_timeout_s``, before the manager binds its port or starts Raft: a
peer that is down costs nothing, a paused one that much.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from manager.config import ConfigError, ManagerConfig, Peer
from protocol.errors import RaftQError
from runtime.http_client import JsonHttpClient


def peer_list(peers: Sequence[Peer]) -> list[str]:
    """The peers as ``/raft_status`` shows them to nodes: ``id=http_url@raft_address``,
    sorted, so two managers' lists compare as they are."""
    return sorted(f"{p.manager_id}={p.http_url}@{p.raft_address}" for p in peers)


def _mine(config: ManagerConfig) -> str:
    (me,) = (p for p in config.peers if p.manager_id == config.manager_id)
    return peer_list([me])[0]


def check_peers_agree(config: ManagerConfig, client: JsonHttpClient) -> bool:
    """Raise ``ConfigError`` naming both lists when a peer that answers lists others.
    Return whether this manager is being added: peers answer, none lists it, and each
    lists exactly the others of this file (it then waits until one does,
    ``manager.joining``)."""
    ours = peer_list(config.peers)
    mine = _mine(config)
    others = sorted(set(ours) - {mine})
    answered = listed = False
    for peer, theirs, changed in _peer_lists(config, client):
        answered = True
        if mine not in theirs and sorted(theirs) == others:
            continue  # this manager is about to be added
        listed = True
        if changed and mine in theirs:
            continue  # managers were added or removed since the files were written
        if sorted(theirs) != ours:
            raise ConfigError(
                f"manager {peer.manager_id} ({peer.http_url}) lists other managers than this "
                f"one: there {sorted(theirs)}, here {ours}; every manager's file "
                "must list the same [[peers]] (raftq node check)"
            )
    return answered and not listed


def listed_by_a_peer(config: ManagerConfig, client: JsonHttpClient) -> bool:
    """Whether a running peer lists this manager as its file does (it was added)."""
    mine = _mine(config)
    return any(mine in theirs for _, theirs, _ in _peer_lists(config, client))


def _peer_lists(
    config: ManagerConfig, client: JsonHttpClient
) -> Iterator[tuple[Peer, list[str], bool]]:
    """Each answering peer, its list of managers and whether managers were added or
    removed since the cluster started."""
    for peer in config.peers:
        if peer.manager_id == config.manager_id:
            continue
        try:
            # Not idempotent: a peer that does not answer in time is not asked again.
            answer = client.call(
                "GET",
                f"{peer.http_url}/raft_status",
                timeout_s=config.limits.manager_peer_check_timeout_s,
            )
        except RaftQError:
            continue  # not running yet
        body = answer.body if answer.status == 200 else None
        theirs = body.get("peers") if isinstance(body, dict) else None
        if not isinstance(theirs, list):
            continue
        changed = isinstance(body, dict) and body.get("peers_changed") is True
        yield peer, [str(item) for item in theirs], changed
