"""The client profile: how the client reaches a cluster, in a small file that ``raftq cluster
up`` (the server's operations commands) writes beside the cluster's own files, and that the
client CLI reads for ``--dir``. The client knows nothing else of a cluster's directory: its
layout (``cluster.json``, node files, logs) belongs to the server.

    {"url": "http://127.0.0.1:17100", "api_key": "...", "tls_ca": null, "node_cert": null}

The file holds an admin key, so it is written with mode 0600.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

PROFILE_FILE = "client.json"


class ProfileError(Exception):
    """The profile is missing or is not one."""


@dataclass(frozen=True, slots=True)
class ClientProfile:
    url: str
    """The load balancer's URL."""
    api_key: str | None = None
    """The admin key ``cluster up`` made, if it made one."""
    tls_ca: str | None = None
    """The CA bundle that the nodes' certificates are checked against (``--tls``)."""
    node_cert: tuple[str, str] | None = None
    """(certificate, key) a tool shows the nodes with its signed requests (``--mutual-tls``)."""

    def to_json(self) -> dict[str, object]:
        return {
            "url": self.url,
            "api_key": self.api_key,
            "tls_ca": self.tls_ca,
            "node_cert": list(self.node_cert) if self.node_cert else None,
        }

    @classmethod
    def from_json(cls, body: object) -> ClientProfile:
        if not isinstance(body, dict):
            raise ProfileError("not a JSON object")
        url, api_key, tls_ca = body.get("url"), body.get("api_key"), body.get("tls_ca")
        if not isinstance(url, str) or not url:
            raise ProfileError("it has no url")
        if not _optional_str(api_key) or not _optional_str(tls_ca):
            raise ProfileError("api_key and tls_ca must be strings or null")
        return cls(url, api_key, tls_ca, _node_cert(body.get("node_cert")))


def profile_path(directory: str | Path) -> Path:
    return Path(directory) / PROFILE_FILE


def read_profile(directory: str | Path) -> ClientProfile:
    path = profile_path(directory)
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"no {path}") from None
    except (OSError, ValueError) as exc:
        raise ProfileError(f"cannot read {path}: {exc}") from exc
    try:
        return ClientProfile.from_json(body)
    except ProfileError as exc:
        raise ProfileError(f"{path}: {exc}") from None


def _optional_str(value: object) -> bool:
    return value is None or isinstance(value, str)


def _node_cert(value: object) -> tuple[str, str] | None:
    if value is None:
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    raise ProfileError("node_cert must be [certificate, key] or null")
