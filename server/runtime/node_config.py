"""One node, one config file: the TOML a manager, broker or load balancer starts from
(``python -m <role> --config FILE``, ``raftq node run --config FILE``), and the checks of a
deployment's files against each other (``raftq node check``). Pure: callers read the files.

A file becomes the role's command line (``NodeFile.argv``), so the role's own parser and
config object stay the one place that validates each setting; this module checks the
file's shape (known keys, types) and the cross-node rules no single node can see.

Relative paths in a file are relative to the file's directory.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROLES = ("manager", "broker", "load_balancer")


class NodeConfigError(ValueError):
    """A config file (or a set of them) that no node may start from; the message names the
    file and the key."""


@dataclass(frozen=True, slots=True)
class _Key:
    kind: type
    required: bool = True
    path: bool = False
    """A file or directory: made absolute against the config file's directory."""


_ADDRESS = {"host": _Key(str), "port": _Key(int)}
_KEYS: dict[str, dict[str, _Key]] = {
    "manager": {
        "role": _Key(str),
        "id": _Key(int),
        **_ADDRESS,
        "raft_port": _Key(int),
        "peers": _Key(list),
        "data_dir": _Key(str, path=True),
        "secret_file": _Key(str, path=True),
        "metrics_token_file": _Key(str, required=False, path=True),
        "mutual_tls": _Key(bool, required=False),
    },
    "broker": {
        "role": _Key(str),
        "id": _Key(int),
        **_ADDRESS,
        "raft_port_min": _Key(int),
        "raft_port_max": _Key(int),
        "data_dir": _Key(str, path=True),
        "db_url": _Key(str, required=False),
        "managers": _Key(list, required=False),
        "managers_url": _Key(str, required=False),
        "secret_file": _Key(str, path=True),
        "limits_may_differ": _Key(bool, required=False),
        "metrics_token_file": _Key(str, required=False, path=True),
        "mutual_tls": _Key(bool, required=False),
    },
    "load_balancer": {
        "role": _Key(str),
        **_ADDRESS,
        "managers": _Key(list),
        "metrics_token_file": _Key(str, required=False, path=True),
    },
}
_TABLES = ("limits", "tls")
_TLS_KEYS = ("cert", "key", "ca")
_PEER_KEYS = {"id": int, "http_url": str, "raft_address": str}


@dataclass(frozen=True, slots=True)
class Peer:
    manager_id: int
    http_url: str
    raft_address: str

    def to_option(self) -> str:
        return f"{self.manager_id}={self.http_url}@{self.raft_address}"


@dataclass(frozen=True, slots=True)
class NodeFile:
    source: str
    """The file's path, for messages."""
    role: str
    node_id: int | None
    """Managers and brokers; None for a load balancer."""
    settings: Mapping[str, object]
    """The top-level keys, paths made absolute."""
    peers: tuple[Peer, ...]
    limits: Mapping[str, str]
    tls: Mapping[str, str]

    @property
    def name(self) -> str:
        return self.role if self.node_id is None else f"{self.role} {self.node_id}"

    def _option_text(self, key: str, value: object) -> str:
        if key == "peers":
            return ",".join(p.to_option() for p in self.peers)
        if isinstance(value, list):  # the managers' URLs (load balancer, broker)
            return ",".join(str(v) for v in value)
        return str(value)

    @property
    def argv(self) -> list[str]:
        """The role's command line (``python -m <role>`` takes these options)."""
        args: list[str] = []
        for key, value in self.settings.items():
            flag = f"--{key.replace('_', '-')}"
            if isinstance(value, bool):  # a switch: present when true
                args += [flag] if value else []
            elif key != "role":
                args += [flag, self._option_text(key, value)]
        for name, limit in self.limits.items():
            args += ["--limit", f"{name}={limit}"]
        for name, path in self.tls.items():
            args += [f"--tls-{name}", path]
        return args


def parse_node_file(text: str, source: str) -> NodeFile:
    """The node file ``source`` holding ``text``; raises ``NodeConfigError``."""
    try:
        body = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise NodeConfigError(f"{source}: not valid TOML: {exc}") from None
    role = body.get("role")
    if role not in ROLES:
        raise NodeConfigError(f"{source}: role must be one of {', '.join(ROLES)}; got {role!r}")
    keys = _KEYS[role]
    unknown = sorted(set(body) - set(keys) - set(_TABLES))
    if unknown:
        raise NodeConfigError(
            f"{source}: unknown key {unknown[0]!r} for a {role} (known: "
            f"{', '.join([*keys, *_TABLES])})"
        )
    base = Path(source).resolve().parent
    settings = {name: _value(body, name, key, source, base) for name, key in keys.items()}
    node_id = settings.get("id")
    return NodeFile(
        source=source,
        role=role,
        node_id=node_id if isinstance(node_id, int) else None,
        settings={k: v for k, v in settings.items() if v is not None},
        peers=_peers(body.get("peers", []), source) if role == "manager" else (),
        limits=_limits(body.get("limits", {}), source),
        tls=_tls(body.get("tls", {}), source, base),
    )


def _value(
    body: Mapping[str, object], name: str, key: _Key, source: str, base: Path
) -> object | None:
    if name not in body:
        if key.required:
            raise NodeConfigError(f"{source}: missing key {name!r}")
        return None
    value = body[name]
    if not isinstance(value, key.kind) or (isinstance(value, bool) and key.kind is not bool):
        raise NodeConfigError(
            f"{source}: {name} must be a {key.kind.__name__}, got {type(value).__name__}"
        )
    if key.path:
        return str(base / str(value))
    return value


def _peers(items: object, source: str) -> tuple[Peer, ...]:
    """``[[peers]]`` tables: every manager, this one included."""
    if not isinstance(items, list) or not items:
        raise NodeConfigError(f"{source}: peers must list every manager ([[peers]] tables)")
    peers = []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or set(item) != set(_PEER_KEYS):
            raise NodeConfigError(
                f"{source}: peer {number} must have exactly {', '.join(_PEER_KEYS)}"
            )
        for field, kind in _PEER_KEYS.items():
            if not isinstance(item[field], kind) or isinstance(item[field], bool):
                raise NodeConfigError(
                    f"{source}: peer {number}'s {field} must be a {kind.__name__}"
                )
        peers.append(Peer(item["id"], str(item["http_url"]).rstrip("/"), item["raft_address"]))
    return tuple(peers)


def _limits(table: object, source: str) -> dict[str, str]:
    if not isinstance(table, dict):
        raise NodeConfigError(f"{source}: [limits] must be a table of name = number")
    limits = {}
    for name, value in table.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise NodeConfigError(f"{source}: limit {name} must be a number")
        limits[name] = str(value)
    return dict(sorted(limits.items()))


def _tls(table: object, source: str, base: Path) -> dict[str, str]:
    if not isinstance(table, dict) or set(table) - set(_TLS_KEYS):
        raise NodeConfigError(f"{source}: [tls] takes only {', '.join(_TLS_KEYS)}")
    for name, value in table.items():
        if not isinstance(value, str):
            raise NodeConfigError(f"{source}: tls {name} must be a path")
    return {name: str(base / table[name]) for name in _TLS_KEYS if name in table}


def check_deployment(files: Sequence[NodeFile]) -> list[str]:
    """What makes these nodes' files inconsistent with each other (empty: nothing):
    two nodes of one role with the same id, managers whose peer lists differ (or leave one
    of them out), brokers or managers whose limits differ, a load balancer that does not
    know every manager."""
    problems = []
    for role in ("manager", "broker"):
        seen: dict[int, str] = {}
        for node in (f for f in files if f.role == role):
            node_id = -1 if node.node_id is None else node.node_id
            if node_id in seen:
                problems.append(f"{role} id {node_id} is in both {seen[node_id]} and {node.source}")
            seen.setdefault(node_id, node.source)
        problems += _limits_differ([f for f in files if f.role == role], role)
    managers = [f for f in files if f.role == "manager"]
    problems += _peers_differ(managers)
    urls = {p.http_url for m in managers for p in m.peers}
    for lb in (f for f in files if f.role == "load_balancer"):
        listed = {str(u).rstrip("/") for u in _as_list(lb.settings.get("managers"))}
        if managers and listed != urls:
            problems.append(
                f"{lb.source} lists managers {sorted(listed)}, the managers' peers are "
                f"{sorted(urls)}"
            )
    for broker in (f for f in files if f.role == "broker"):
        problems += _broker_managers(broker, urls if managers else None)
    return problems


def _broker_managers(broker: NodeFile, urls: set[str] | None) -> list[str]:
    """A broker must list managers' own URLs (``managers``): its node requests never go
    through the load balancer (issue 23)."""
    if "managers_url" in broker.settings:
        return [
            f"{broker.source}: managers_url (the load balancer) is no longer taken: list the "
            "managers' own URLs in managers = [...]"
        ]
    listed = {str(u).rstrip("/") for u in _as_list(broker.settings.get("managers"))}
    if not listed:
        return [f"{broker.source} lists no managers (managers = [...])"]
    if urls is not None and not listed <= urls:
        return [
            f"{broker.source} lists {sorted(listed - urls)} among its managers, which no "
            f"manager is (the managers' peers are {sorted(urls)})"
        ]
    return []


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _peers_differ(managers: Sequence[NodeFile]) -> list[str]:
    if not managers:
        return []
    first, problems = managers[0], []
    for other in managers[1:]:
        if set(other.peers) != set(first.peers):
            problems.append(f"the peers of {other.source} differ from those of {first.source}")
    ids = {p.manager_id for p in first.peers}
    for manager in managers:
        if manager.node_id not in ids:
            problems.append(f"{manager.source}: manager {manager.node_id} is not in its peers")
    return problems


def _limits_differ(nodes: Sequence[NodeFile], role: str) -> list[str]:
    problems = []
    for node in nodes[1:]:
        names = sorted(set(node.limits) | set(nodes[0].limits))
        differ = [n for n in names if node.limits.get(n) != nodes[0].limits.get(n)]
        if differ:
            name = differ[0]
            problems.append(
                f"{role} limits differ: {name} is {nodes[0].limits.get(name, 'default')} in "
                f"{nodes[0].source}, {node.limits.get(name, 'default')} in {node.source}"
            )
    return problems


def node_file_text(
    settings: Mapping[str, object],
    peers: Sequence[Peer] = (),
    limits: Mapping[str, str] | None = None,
    tls: Mapping[str, str] | None = None,
) -> str:
    """The TOML of a node file (``raftq cluster up`` writes one per node): ``settings`` are
    the top-level keys (``role`` first), ``limits`` values are numbers as text."""
    lines = [f"{name} = {_toml(value)}" for name, value in settings.items()]
    for peer in peers:
        lines += [
            "",
            "[[peers]]",
            f"id = {peer.manager_id}",
            f"http_url = {_toml(peer.http_url)}",
            f"raft_address = {_toml(peer.raft_address)}",
        ]
    if limits:
        lines += ["", "[limits]", *(f"{name} = {value}" for name, value in limits.items())]
    if tls:
        lines += ["", "[tls]", *(f"{name} = {_toml(path)}" for name, path in tls.items())]
    return "\n".join(lines) + "\n"


def _toml(value: object) -> str:
    """A TOML value: JSON's strings, numbers and arrays are TOML's too."""
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else str(value)
