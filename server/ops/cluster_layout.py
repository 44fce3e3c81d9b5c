"""The local cluster's shape: node names, ports, node files, command lines and
``cluster.json``. Pure.

Port layout for base port B (see ARCHITECTURE.md): load balancer B; manager i (1..3) HTTP
B+10+i and Raft B+20+i; broker i (1..N) HTTP B+30+i and Raft ports B+100*i .. B+100*i+99.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from protocol.redaction import url_without_password
from runtime.node_config import Peer, node_file_text

MANAGER_COUNT = 3
"""Managers a cluster starts with."""
MANAGER_ID_MAX = 9
"""Manager i's ports are B+10+i and B+20+i: below the brokers' B+31.."""
DEFAULT_BROKER_COUNT = 3
BROKER_COUNT_MIN = 3
"""Every partition has three replicas, each on its own broker."""
BROKER_COUNT_MAX = 60
"""Broker i's HTTP port B+30+i must stay below broker 1's first Raft port B+100."""
DEFAULT_BASE_PORT = 17100
DEFAULT_HOST = "127.0.0.1"
LB_NAME = "lb"
CLUSTER_FILE = "cluster.json"
SECRET_FILE = "secret"
TLS_DIR = "tls"
LOG_FILE = "node.log"
CONFIG_FILE = "node.toml"


def port_span(broker_count: int) -> int:
    """Highest port offset used from the base port (the last broker's last Raft port)."""
    return 100 * broker_count + 99


class LayoutError(ValueError):
    """The settings cannot describe a local cluster."""


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    directory: Path
    """Absolute; holds cluster.json, the secret and one sub-directory per node."""
    host: str = DEFAULT_HOST
    base_port: int = DEFAULT_BASE_PORT
    db_url: str | None = None
    """PostgreSQL URL whose database name gets ``_broker_<i>`` per broker; None: SQLite."""
    limits: tuple[tuple[str, str], ...] = ()
    """``--limit name=value`` overrides given to every node."""
    tls: bool = False
    """Every HTTP listener serves HTTPS with a certificate of the cluster's own CA
    (``ops.local_tls``), and every node checks its peers against that CA."""
    brokers: int = DEFAULT_BROKER_COUNT
    """Brokers 1..N; every partition's three replicas go to three of them."""
    hosts: tuple[str, ...] = ()
    """One address per node, in start order (load balancer, managers, brokers), as if each
    ran on its own host; empty: every node on ``host``."""
    managers: int = MANAGER_COUNT
    """Managers 1..M (``raftq manager add`` adds the next); their Raft group's members
    are the managers' own record since (``manager/registry/managers.py``)."""
    removed_managers: tuple[int, ...] = ()
    """Managers removed by ``raftq manager remove``: never started again."""
    removed_brokers: tuple[int, ...] = ()
    """Brokers of 1..N removed by ``raftq broker remove``: never started again (their ids
    are refused by the managers); the others keep their ids and ports."""
    mutual_tls: bool = False
    """With ``tls``: managers and brokers show their certificate to the peers they call and
    take node requests only from callers with one of the cluster's CA (``--mutual-tls``)."""

    @property
    def manager_ids(self) -> tuple[int, ...]:
        """The managers this cluster runs."""
        return tuple(i for i in range(1, self.managers + 1) if i not in self.removed_managers)

    @property
    def broker_ids(self) -> tuple[int, ...]:
        """The brokers this cluster runs."""
        return tuple(i for i in range(1, self.brokers + 1) if i not in self.removed_brokers)

    def validate(self) -> ClusterSettings:
        if not self.directory.is_absolute():
            raise LayoutError("the cluster directory must be absolute")
        if not MANAGER_COUNT <= self.managers <= MANAGER_ID_MAX:
            raise LayoutError(f"managers must be between {MANAGER_COUNT} and {MANAGER_ID_MAX}")
        if self.hosts and self.managers != MANAGER_COUNT:
            raise LayoutError("a cluster with --hosts has three managers")
        if not BROKER_COUNT_MIN <= self.brokers <= BROKER_COUNT_MAX:
            raise LayoutError(
                f"--brokers must be between {BROKER_COUNT_MIN} and {BROKER_COUNT_MAX}"
            )
        highest = 65535 - port_span(self.brokers)
        if not 1024 <= self.base_port <= highest:
            raise LayoutError(f"--base-port must be between 1024 and {highest}")
        if self.db_url is not None:
            broker_db_url(self.db_url, 1)  # raises LayoutError when unusable
        if self.mutual_tls and not self.tls:
            raise LayoutError("--mutual-tls needs --tls")
        if self.hosts and len(self.hosts) != 1 + MANAGER_COUNT + self.brokers:
            raise LayoutError(
                f"--hosts needs {1 + MANAGER_COUNT + self.brokers} addresses (load balancer, "
                f"{MANAGER_COUNT} managers, {self.brokers} brokers), got {len(self.hosts)}"
            )
        return self

    def host_of(self, name: str) -> str:
        """The address node ``name`` binds."""
        if not self.hosts:
            return self.host
        order = [LB_NAME, *(f"manager-{i}" for i in range(1, MANAGER_COUNT + 1))]
        order += [f"broker-{i}" for i in range(1, self.brokers + 1)]
        return self.hosts[order.index(name)]

    @property
    def secret_file(self) -> Path:
        return self.directory / SECRET_FILE

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def lb_url(self) -> str:
        return f"{self.scheme}://{self.host_of(LB_NAME)}:{self.base_port}"

    @property
    def tls_ca_file(self) -> Path:
        """The CA certificate that signed the nodes' certificate (only with ``tls``)."""
        return self.directory / TLS_DIR / "ca.pem"

    @property
    def tls_cert_file(self) -> Path:
        return self.directory / TLS_DIR / "node.pem"

    @property
    def tls_key_file(self) -> Path:
        return self.directory / TLS_DIR / "node-key.pem"

    @property
    def node_cert(self) -> tuple[str, str] | None:
        """(certificate, key) a tool shows the nodes with its signed requests: with
        ``mutual_tls``, the nodes' own (``None`` otherwise)."""
        if not self.mutual_tls:
            return None
        return str(self.tls_cert_file), str(self.tls_key_file)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    role: str
    """"manager", "broker" or "load_balancer" (also the module run with ``python -m``)."""
    node_id: int | None
    http_address: str
    data_dir: Path
    log_file: Path
    argv: tuple[str, ...]
    """``python -m <role> --config <config_file>``."""
    config_file: Path
    config_text: str
    """The node file (TOML, ``runtime.node_config``) the node starts from."""
    raft_address: str | None = None
    raft_port_min: int | None = None
    raft_port_max: int | None = None

    def to_json(self, pid: int | None) -> dict[str, object]:
        body: dict[str, object] = {
            "name": self.name,
            "role": self.role,
            "id": self.node_id,
            "pid": pid,
            "http_address": self.http_address,
        }
        if self.raft_address is not None:
            body["raft_address"] = self.raft_address
        if self.raft_port_min is not None:
            body["raft_port_min"] = self.raft_port_min
            body["raft_port_max"] = self.raft_port_max
        body.update(data_dir=str(self.data_dir), log_file=str(self.log_file), argv=list(self.argv))
        body["config_file"] = str(self.config_file)
        return body


def manager_ports(base_port: int, manager_id: int) -> tuple[int, int]:
    """(HTTP port, Raft port) of manager ``manager_id`` (1-based)."""
    return base_port + 10 + manager_id, base_port + 20 + manager_id


def broker_ports(base_port: int, broker_id: int) -> tuple[int, int, int]:
    """(HTTP port, lowest Raft port, highest Raft port) of broker ``broker_id`` (1-based)."""
    return base_port + 30 + broker_id, base_port + 100 * broker_id, base_port + 100 * broker_id + 99


def broker_db_url(db_url: str, broker_id: int) -> str:
    """``postgresql://u:p@h:5432/raftq`` -> ``postgresql://u:p@h:5432/raftq_broker_1``."""
    parts = urlsplit(db_url)
    if not parts.scheme.startswith("postgresql"):
        raise LayoutError("--db-url must be a postgresql:// URL (without it brokers use SQLite)")
    name = parts.path.lstrip("/")
    if not name or "/" in name:
        shown = url_without_password(db_url)  # never the password: this is printed
        raise LayoutError(f"--db-url must name a database, e.g. .../raftq: {shown!r}")
    return urlunsplit(parts._replace(path=f"/{name}_broker_{broker_id}"))


def _shared_tables(settings: ClusterSettings) -> tuple[dict[str, str], dict[str, str]]:
    """Every node's ``[limits]`` and ``[tls]``."""
    tls = {}
    if settings.tls:
        tls = {
            "cert": str(settings.tls_cert_file),
            "key": str(settings.tls_key_file),
            "ca": str(settings.tls_ca_file),
        }
    return dict(settings.limits), tls


def _node(
    settings: ClusterSettings,
    python: str,
    name: str,
    body: dict[str, object],
    peers: tuple[Peer, ...] = (),
) -> tuple[Path, Path, Path, tuple[str, ...], str]:
    """(data dir, log file, config file, command line, config text) of one node."""
    data_dir = settings.directory / name
    config_file = data_dir / CONFIG_FILE
    limits, tls = _shared_tables(settings)
    text = node_file_text(body, peers, limits, tls)
    argv = (python, "-m", str(body["role"]), "--config", str(config_file))
    return data_dir, data_dir / LOG_FILE, config_file, argv, text


def _manager_peers(settings: ClusterSettings) -> tuple[Peer, ...]:
    peers = []
    for j in settings.manager_ids:
        host = settings.host_of(f"manager-{j}")
        http_port, raft_port = manager_ports(settings.base_port, j)
        peers.append(Peer(j, f"{settings.scheme}://{host}:{http_port}", f"{host}:{raft_port}"))
    return tuple(peers)


def _manager(settings: ClusterSettings, python: str, i: int) -> NodeSpec:
    name = f"manager-{i}"
    host = settings.host_of(name)
    http_port, raft_port = manager_ports(settings.base_port, i)
    body: dict[str, object] = {"role": "manager", "id": i, "host": host, "port": http_port}
    body.update(raft_port=raft_port, data_dir=str(settings.directory / name))
    body.update(secret_file=str(settings.secret_file))
    if settings.mutual_tls:
        body["mutual_tls"] = True
    data_dir, log_file, config_file, argv, text = _node(
        settings, python, name, body, _manager_peers(settings)
    )
    return NodeSpec(
        name,
        "manager",
        i,
        f"{settings.scheme}://{host}:{http_port}",
        data_dir,
        log_file,
        argv,
        config_file,
        text,
        raft_address=f"{host}:{raft_port}",
    )


def _broker(settings: ClusterSettings, python: str, i: int) -> NodeSpec:
    name = f"broker-{i}"
    host = settings.host_of(name)
    http_port, raft_min, raft_max = broker_ports(settings.base_port, i)
    body: dict[str, object] = {"role": "broker", "id": i, "host": host, "port": http_port}
    body.update(raft_port_min=raft_min, raft_port_max=raft_max)
    body.update(data_dir=str(settings.directory / name))
    if settings.db_url is not None:
        body["db_url"] = broker_db_url(settings.db_url, i)
    # The managers' own URLs: a broker's node requests never go through the load balancer.
    managers = [peer.http_url for peer in _manager_peers(settings)]
    body.update(managers=managers, secret_file=str(settings.secret_file))
    if settings.mutual_tls:
        body["mutual_tls"] = True
    data_dir, log_file, config_file, argv, text = _node(settings, python, name, body)
    return NodeSpec(
        name,
        "broker",
        i,
        f"{settings.scheme}://{host}:{http_port}",
        data_dir,
        log_file,
        argv,
        config_file,
        text,
        raft_port_min=raft_min,
        raft_port_max=raft_max,
    )


def _load_balancer(settings: ClusterSettings, python: str) -> NodeSpec:
    managers = [peer.http_url for peer in _manager_peers(settings)]
    body: dict[str, object] = {"role": "load_balancer", "host": settings.host_of(LB_NAME)}
    body.update(port=settings.base_port, managers=managers)
    data_dir, log_file, config_file, argv, text = _node(settings, python, LB_NAME, body)
    return NodeSpec(
        LB_NAME,
        "load_balancer",
        None,
        settings.lb_url,
        data_dir,
        log_file,
        argv,
        config_file,
        text,
    )


def plan_nodes(settings: ClusterSettings, python: str) -> tuple[NodeSpec, ...]:
    """Every node, in start order: load balancer, managers, brokers."""
    return (
        _load_balancer(settings, python),
        *(_manager(settings, python, i) for i in settings.manager_ids),
        *(_broker(settings, python, i) for i in settings.broker_ids),
    )


def cluster_json(
    settings: ClusterSettings,
    nodes: tuple[NodeSpec, ...],
    pids: Mapping[str, int | None],
    admin_key: str | None = None,
) -> dict[str, object]:
    """``admin_key``: the admin API key ``cluster up`` made (the file is then mode 0600)."""
    body: dict[str, object] = {
        "load_balancer_url": settings.lb_url,
        "secret_file": str(settings.secret_file),
        "base_port": settings.base_port,
        "host": settings.host,
        "db_url": settings.db_url,
        "limits": dict(settings.limits),
        "tls": settings.tls,
        "mutual_tls": settings.mutual_tls,
        "brokers": settings.brokers,
        "hosts": list(settings.hosts),
        "removed_brokers": list(settings.removed_brokers),
        "managers": settings.managers,
        "removed_managers": list(settings.removed_managers),
        "nodes": [node.to_json(pids.get(node.name)) for node in nodes],
    }
    if settings.tls:
        body["tls_ca"] = str(settings.tls_ca_file)
    if admin_key is not None:
        body["admin_key"] = admin_key
    return body


def admin_key_of(body: object) -> str | None:
    """The admin API key a ``cluster.json`` holds, if any."""
    key = body.get("admin_key") if isinstance(body, dict) else None
    return key if isinstance(key, str) and key else None


def parse_cluster_json(directory: Path, body: object) -> tuple[ClusterSettings, dict[str, int]]:
    """The settings and the recorded pids of a ``cluster.json``."""
    if not isinstance(body, dict):
        raise LayoutError(f"{CLUSTER_FILE} is not a JSON object")
    host, base_port, db_url = body.get("host"), body.get("base_port"), body.get("db_url")
    limits, tls = body.get("limits", {}), body.get("tls", False)
    brokers = body.get("brokers", DEFAULT_BROKER_COUNT)  # absent in files of older versions
    mutual_tls = body.get("mutual_tls", False)  # absent in files of older versions
    if not isinstance(tls, bool) or not isinstance(mutual_tls, bool):
        raise LayoutError(f"{CLUSTER_FILE}: tls and mutual_tls must be true or false")
    if not isinstance(brokers, int) or isinstance(brokers, bool):
        raise LayoutError(f"{CLUSTER_FILE}: brokers must be a number")
    removed = body.get("removed_brokers", [])
    if not isinstance(removed, list) or not all(type(i) is int for i in removed):
        raise LayoutError(f"{CLUSTER_FILE}: removed_brokers must be a list of broker ids")
    managers = body.get("managers", MANAGER_COUNT)
    removed_managers = body.get("removed_managers", [])
    if type(managers) is not int or not isinstance(removed_managers, list):
        raise LayoutError(f"{CLUSTER_FILE}: managers must be a number, removed_managers a list")
    if not all(type(i) is int for i in removed_managers):
        raise LayoutError(f"{CLUSTER_FILE}: removed_managers must be a list of manager ids")
    hosts = body.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise LayoutError(f"{CLUSTER_FILE}: hosts must be a list of addresses")
    if not isinstance(host, str) or not isinstance(base_port, int):
        raise LayoutError(f"{CLUSTER_FILE} lacks host or base_port")
    if db_url is not None and not isinstance(db_url, str):
        raise LayoutError(f"{CLUSTER_FILE}: db_url must be a string or null")
    if not isinstance(limits, dict) or not all(isinstance(v, str) for v in limits.values()):
        raise LayoutError(f"{CLUSTER_FILE}: limits must map names to strings")
    settings = ClusterSettings(
        directory,
        host,
        base_port,
        db_url,
        tuple(sorted(limits.items())),
        tls,
        brokers,
        tuple(hosts),
        managers,
        tuple(removed_managers),
        tuple(removed),
        mutual_tls,
    )
    pids: dict[str, int] = {}
    nodes = body.get("nodes", [])
    for node in nodes if isinstance(nodes, list) else []:
        if isinstance(node, dict) and isinstance(node.get("name"), str):
            pid = node.get("pid")
            if isinstance(pid, int) and pid > 0:
                pids[node["name"]] = pid
    return settings.validate(), pids
