"""The OpenAPI 3 document of each kind of node, assembled from ``openapi.json`` beside this
module: the one home of the API description (``paths`` are the manager's, and two extension
keys hold the broker's paths and the load balancer's own routes; see that file's
``info.description``).

One file for three documents because the nodes share most of the vocabulary (errors,
messages, acks, security schemes) while some paths mean different things on each (a broker's
``POST /partitions`` hosts a replica, a manager's adds a partition), and one OpenAPI document
holds a path once. Reads only that packaged file; pure otherwise.
"""

from __future__ import annotations

import copy
import functools
import json
from enum import Enum
from importlib import resources

BROKER_PATHS = "x-raftq-broker-paths"
LOAD_BALANCER_PATHS = "x-raftq-load-balancer-paths"
"""The routes the load balancer answers itself; it forwards every other request to the
manager leader, so the rest of its document is the manager's."""


class Node(Enum):
    MANAGER = "manager"
    BROKER = "broker"
    LOAD_BALANCER = "load_balancer"


def api_document(node: Node) -> dict[str, object]:
    """The document ``node`` serves at ``GET /openapi.json`` (a fresh copy: callers may
    change it)."""
    source = _source()
    manager_paths = _mapping(source["paths"])
    paths = {
        Node.MANAGER: manager_paths,
        Node.BROKER: _mapping(source[BROKER_PATHS]),
        Node.LOAD_BALANCER: {
            **_without_internal(manager_paths),
            **_mapping(source[LOAD_BALANCER_PATHS]),
        },
    }[node]
    document = {key: value for key, value in source.items() if not key.startswith("x-raftq-")}
    info = _mapping(source["info"])
    document["info"] = {**info, "title": f"RaftQ {node.value.replace('_', ' ')}"}
    document["paths"] = paths
    return copy.deepcopy(document)


def _without_internal(paths: dict[str, object]) -> dict[str, object]:
    """The operations a client may send: the load balancer forwards no node request (issue
    23: they go straight to the node they are for), so its document leaves those out."""
    kept: dict[str, object] = {}
    for path, item in paths.items():
        methods = {
            method: operation
            for method, operation in _mapping(item).items()
            if method not in _METHODS or not _internal(operation)
        }
        if any(method in _METHODS for method in methods):
            kept[path] = methods
    return kept


def _internal(operation: object) -> bool:
    tags = _mapping(operation).get("tags")
    return isinstance(tags, list) and "internal" in tags


def operations(document: dict[str, object]) -> set[tuple[str, str]]:
    """Every ``(METHOD, path)`` a document describes."""
    return {
        (method.upper(), path)
        for path, item in _mapping(document["paths"]).items()
        for method in _mapping(item)
        if method in _METHODS
    }


_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


@functools.cache
def _source() -> dict[str, object]:
    text = resources.files("protocol").joinpath("openapi.json").read_text(encoding="utf-8")
    return _mapping(json.loads(text))


def _mapping(value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        raise TypeError(f"openapi.json: expected an object, got {type(value).__name__}")
    return value
