"""The manager's configuration: one frozen object built once in ``__main__``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from protocol.limits import Limits
from runtime.tls import NO_TLS, TlsFiles

_PEER = re.compile(r"^(\d+)=(https?://[^@\s]+)@([^:@\s]+):(\d+)$")


class ConfigError(ValueError):
    """The command line is inconsistent; the process refuses to start."""


@dataclass(frozen=True, slots=True)
class Peer:
    manager_id: int
    http_url: str
    raft_address: str
    """``host:port`` of its Raft node."""


def parse_peers(text: str) -> tuple[Peer, ...]:
    """``1=http://H:P1@H:R1,2=...``: every manager, itself included."""
    peers = []
    for item in text.split(","):
        match = _PEER.match(item.strip())
        if match is None:
            raise ConfigError(f"bad peer {item!r}: expected id=http://host:port@host:raft_port")
        manager_id, url, host, port = match.groups()
        peers.append(Peer(int(manager_id), url.rstrip("/"), f"{host}:{int(port)}"))
    if len({p.manager_id for p in peers}) != len(peers):
        raise ConfigError("peer ids must be distinct")
    if len({p.raft_address for p in peers}) != len(peers):
        raise ConfigError("peer Raft addresses must be distinct")
    return tuple(peers)


@dataclass(frozen=True, slots=True)
class ManagerConfig:
    manager_id: int
    host: str
    port: int
    raft_port: int
    peers: tuple[Peer, ...]
    data_dir: Path
    secret: str = field(repr=False)
    limits: Limits
    tls: TlsFiles = NO_TLS
    metrics_token: str | None = field(default=None, repr=False)
    """Opt-in bearer for ``/metrics`` only (``--metrics-token-file``)."""

    def __post_init__(self) -> None:
        if not self.secret:
            raise ConfigError("the cluster secret is empty")
        scheme = f"{self.tls.scheme}://"
        wrong = [p.http_url for p in self.peers if not p.http_url.startswith(scheme)]
        if wrong:
            raise ConfigError(
                f"with{'' if self.tls.serves_tls else 'out'} --tls-cert every manager in "
                f"--peers serves {scheme} URLs; not: {', '.join(wrong)}"
            )
        me = [p for p in self.peers if p.manager_id == self.manager_id]
        if len(me) != 1:
            raise ConfigError(f"--peers does not list this manager (id {self.manager_id})")
        if me[0].raft_address != self.raft_address:
            raise ConfigError(
                f"--peers gives manager {self.manager_id} Raft address {me[0].raft_address}, "
                f"but --host/--raft-port say {self.raft_address}"
            )

    @property
    def raft_address(self) -> str:
        return f"{self.host}:{self.raft_port}"

    @property
    def http_url(self) -> str:
        return f"{self.tls.scheme}://{self.host}:{self.port}"

    @property
    def partner_raft_addresses(self) -> list[str]:
        return [p.raft_address for p in self.peers if p.manager_id != self.manager_id]

    def peer_by_raft_address(self, raft_address: str) -> Peer | None:
        for peer in self.peers:
            if peer.raft_address == raft_address:
                return peer
        return None

    @property
    def journal_path(self) -> Path:
        return self.data_dir / "manager.journal"

    @property
    def dump_path(self) -> Path:
        return self.data_dir / "manager.dump"
