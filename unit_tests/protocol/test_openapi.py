"""The API document (``protocol/openapi.json``) against the code, without a process or a
socket: it is a valid OpenAPI document; every route each node's ``create_app`` registers is
in its document and nothing else is; each node serves its own document; tags and security
agree; and what each operation's parameters or body say (names, required-ness, bounds,
enums) is what the ``protocol.requests`` parser its handler calls accepts and refuses, at
the default ``Limits()``."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
from openapi_spec_validator import validate

import broker.app
import load_balancer.app
import manager.app
from broker.config import BrokerConfig
from broker.persistence.store import MemoryMessageStore
from load_balancer.config import LoadBalancerConfig
from load_balancer.leader_tracker import LeaderTracker
from manager.broker_client import BrokerClient
from manager.raft import registry_twin
from protocol.access import Action
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import (
    SETTLE_ACTIONS,
    BrokerReceive,
    CreateGroup,
    DeadLettersQuery,
    GroupReceive,
    GroupRedrive,
    ListGroups,
    MarkDeadLettered,
    RedriveRequest,
    SettleRequest,
)
from protocol.limits import Limits
from protocol.openapi import Node, api_document, operations
from protocol.requests import (
    AddressChallenge,
    BrokerRef,
    ChecksumRange,
    CreateKeyRequest,
    CreateTopic,
    Fetch,
    KeyRef,
    ManagerRef,
    Params,
    Pop,
    Produce,
    QueryText,
    RegisterBroker,
    RegisterConsumer,
    RegisterProducer,
    ReplaceMember,
    ReplicaConsumer,
    ReplicaRef,
    TopicRef,
    VerifyClient,
    VerifyKey,
    invalid,
    parse_replica_spec,
    partition_ref,
)
from runtime.http_api import App
from runtime.http_client import PeerLink
from runtime.http_server import HttpRequest
from unit_tests.manager.in_memory_app import Idle, manager_config, patch_manager

LIMITS = Limits()
INT_MAX = 2**63 - 1
Schema = dict[str, object]


# --- the apps, built by their own create_app with nothing started --------------------------


@pytest.fixture
def apps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[Node, App]]:
    patch_manager(monkeypatch, registry_twin(), BrokerClient(LIMITS, PeerLink(None, None)))
    monkeypatch.setattr(broker.app, "SqlMessageStore", lambda _url: MemoryMessageStore())
    monkeypatch.setattr(broker.app, "Registration", Idle)
    monkeypatch.setattr(logging, "basicConfig", lambda **_kwargs: None)
    monkeypatch.setattr(LeaderTracker, "start", lambda _self: None)
    broker_config = BrokerConfig(
        broker_id=1,
        host="127.0.0.1",
        port=1,
        raft_port_min=2,
        raft_port_max=3,
        data_dir=str(tmp_path / "broker"),
        db_url="unused",
        managers=("http://127.0.0.1:1",),
        secret="s",
        limits=LIMITS,
    )
    built = {
        Node.MANAGER: manager.app.create_app(manager_config(tmp_path / "manager", LIMITS)),
        Node.BROKER: broker.app.create_app(broker_config),
        Node.LOAD_BALANCER: load_balancer.app.create_app(
            LoadBalancerConfig("127.0.0.1", 1, ("http://127.0.0.1:1",), LIMITS)
        ),
    }
    yield built
    for app in built.values():
        app.close()


# --- the document itself --------------------------------------------------------------------


@pytest.mark.parametrize("node", list(Node))
def test_each_node_document_is_valid_openapi(node: Node) -> None:
    validate(api_document(node))


def test_the_source_file_is_itself_a_valid_document() -> None:
    source = Path(__file__).parents[2] / "protocol" / "openapi.json"
    validate(json.loads(source.read_text(encoding="utf-8")))


@pytest.mark.parametrize("node", [Node.MANAGER, Node.BROKER])
def test_routes_and_document_are_the_same_operations(node: Node, apps: dict[Node, App]) -> None:
    assert set(apps[node].routes()) == operations(api_document(node))


_SECURITY_OF = {Action.OPEN: set[str](), Action.NODE: {"nodeAuth"}}
"""Every other action: an API key (bearerAuth), and a broker's client routes also take a
node (the manager calls them for traffic it has checked)."""


@pytest.mark.parametrize("node", list(Node))
def test_each_routes_action_is_its_documented_security(node: Node, apps: dict[Node, App]) -> None:
    """What a route declares in the code (``App.route``'s action) and what the document
    says it needs agree: no route is open, or node-only, in one and not the other."""
    paths = _object(api_document(node)["paths"])
    for method, path in apps[node].routes():
        if path not in paths:
            continue  # the load balancer's forwarded routes are the manager's
        operation = _object(_object(paths[path])[method.lower()])
        schemes = {
            name for entry in _list(operation.get("security", [])) for name in _object(entry)
        }
        action = apps[node].action(method, path)
        expected = _SECURITY_OF.get(action)
        if expected is None:
            assert "bearerAuth" in schemes, (node, method, path, schemes)
        else:
            assert schemes == expected, (node, method, path, action, schemes)


def test_the_load_balancer_documents_its_routes_and_what_it_forwards(
    apps: dict[Node, App],
) -> None:
    """The load balancer routes a few paths itself (their description differs from the
    manager's, or it is this document) and forwards every other request to the manager
    leader: its document is its own routes plus the manager's operations that a client may
    send (it refuses node requests: they go straight to the node they are for)."""
    own = set(apps[Node.LOAD_BALANCER].routes())
    document = api_document(Node.LOAD_BALANCER)
    manager_document = api_document(Node.MANAGER)
    paths, manager_paths = _object(document["paths"]), _object(manager_document["paths"])
    described_here = {
        (method, path)
        for method, path in operations(document)
        if _object(paths[path])[method.lower()]
        != _object(manager_paths.get(path, {})).get(method.lower())
        or path == "/openapi.json"
    }
    assert own == described_here
    internal = {
        (method.upper(), path)
        for path, item in manager_paths.items()
        for method, operation in _object(item).items()
        if "internal" in _list(_object(operation).get("tags", []))
    }
    assert internal >= {("POST", "/brokers"), ("POST", "/keys/verify")}
    assert operations(document) == own | (operations(manager_document) - internal)


@pytest.mark.parametrize("node", list(Node))
def test_each_node_serves_its_own_document(node: Node, apps: dict[Node, App]) -> None:
    answer = apps[node].handle(HttpRequest("GET", "/openapi.json", []))
    assert answer.status == 200
    assert ("Content-Type", "application/json") in answer.headers
    assert json.loads(answer.body) == api_document(node)


def _each_operation() -> Iterator[tuple[Node, str, str, Schema]]:
    for node in Node:
        document = api_document(node)
        for path, item in _object(document["paths"]).items():
            for method, operation in _object(item).items():
                yield node, method.upper(), path, _object(operation)


def test_tags_and_security_agree() -> None:
    """``open``: no authentication; ``client``: an API key; ``internal``: the node token;
    every secured operation declares 401 and 403 with the error body."""
    schemes = {"open": None, "client": "bearerAuth", "internal": "nodeAuth"}
    for node, method, path, operation in _each_operation():
        where = f"{node.value} {method} {path}"
        tags = _list(operation["tags"])
        security = [name for option in _list(operation["security"]) for name in _object(option)]
        assert tags and all(tag in schemes for tag in tags), where
        if tags == ["open"]:
            assert security == [], where
            continue
        assert sorted(security) == sorted(str(schemes[str(tag)]) for tag in tags), where
        responses = _object(operation["responses"])
        for status in ("401", "403"):
            assert _resolve(responses[status])["content"] == {
                "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
            }, where


def test_every_error_code_is_documented() -> None:
    error = _object(_object(_object(api_document(Node.MANAGER)["components"])["schemas"])["Error"])
    for code in ErrorCode:
        assert f"{code.name}={code.value}" in str(error["description"]), code


# --- parameters and bodies against protocol.requests --------------------------------------


Parser = Callable[[Params, Limits], object]


def _manager_produce(params: Params, limits: Limits) -> object:
    # LogRouter.produce refuses a produce without producer_id (400) before anything else.
    request = Produce.parse(params, limits)
    if request.producer_id is None:
        raise invalid("missing field 'producer_id'")
    return request


def _broker_pop(params: Params, limits: Limits) -> object:
    return partition_ref(params, limits), Pop.parse(params, limits)  # as broker/api/logs.py


def _replica(index: int) -> dict[str, object]:
    return {
        "replica_id": index,
        "broker_id": index,
        "address": f"http://b{index}",
        "raft_address": f"h:{9000 + index}",
    }


def _message(_index: int) -> dict[str, object]:
    return {"message": "m"}


@dataclass(frozen=True)
class Parsed:
    """One operation (one variant of its body, or one mode of its query) and the parser its
    handler calls. ``valid`` sets every field of the variant, each well inside its bounds and
    chosen so that moving one field to its bound never breaks a rule between fields."""

    node: Node
    method: str
    path: str
    parse: Parser
    valid: dict[str, object]
    branch: int | None = None
    """Which ``oneOf`` branch of the body ``valid`` is."""
    mode: str | None = None
    """Which ``x-raftq-modes`` mode of the query ``valid`` is."""
    items: dict[str, Callable[[int], object]] = field(default_factory=dict)
    """How to build the i-th item of an array field, for probing its size bounds."""
    fixed: frozenset[str] = frozenset()
    """Fields of ``valid`` not probed in this variant: a rule ties their bounds to another
    field set here (another variant, without that field, probes them)."""

    def __post_init__(self) -> None:
        if self.method == "GET":  # its fields come from the query string, as text
            parse = self.parse
            object.__setattr__(self, "parse", lambda params, limits: parse(_Query(params), limits))


class _Query(Mapping[str, object]):
    """``params`` as ``runtime.http_api.request_params`` gives a query string: its text values
    are ``QueryText`` (only those may spell a number)."""

    def __init__(self, params: Mapping[str, object]) -> None:
        self._params = params

    def __getitem__(self, name: str) -> object:
        value = self._params[name]
        return QueryText(value) if isinstance(value, str) else value

    def get(self, name: str, default: object = None) -> object:
        value = self._params.get(name, default)
        return QueryText(value) if isinstance(value, str) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)


PRODUCE_ONE = {
    "topic": "orders",
    "producer_id": "p",
    "sequence": 1,
    "partition_id": 0,
    "partition_count": 1,
    "durability": "fsync",
    "message": "m",
    "key": None,  # null: so the message may take every byte (message_bytes_max counts both)
    "headers": {},  # none, for the same reason
}
PRODUCE_MANY = {
    **{k: v for k, v in PRODUCE_ONE.items() if k not in ("message", "key", "headers")},
    "messages": [{"message": "m", "key": "k", "headers": {"h": "v"}}],
}
POP: dict[str, object] = {
    "after_unknown_outcome": "true",
    "wait_ms": "10",
    "if_ready": "true",
    "consumer_id": "c",
    "max_messages": "1",
    "request_id": "r",
    "sequence": "1",
}
FETCH: dict[str, object] = {
    "topic": "orders",
    "partition_id": "0",
    "offset": "0",
    "max_messages": "1",
    "skip_removed": "true",
    "wait_ms": "10",
}
SPEC = {
    "topic": "orders",
    "partition_id": 0,
    "replica_id": 0,
    "replicas": [_replica(i) for i in range(LIMITS.replication_factor)],
    "limits": LIMITS.partition_limits().to_json(),
    "leaving": {**_replica(0), "broker_id": 7, "raft_address": "h:9007"},
}
RECEIVE: dict[str, object] = {
    "topic": "orders",
    "max_messages": "1",
    "request_id": "r",
    "wait_ms": "10",
}
BROKER_RECEIVE: dict[str, object] = {
    **RECEIVE,
    "partition_id": "0",
    "visibility_timeout_ms": "30000",
    "max_deliveries": "5",
    "ordering": "key",
}
SETTLE: dict[str, dict[str, object]] = {
    "ack": {"topic": "orders", "receipts": ["0.1.1"]},
    "nack": {"topic": "orders", "receipts": ["0.1.1"], "delay_ms": 10},
    "extend": {"topic": "orders", "receipts": ["0.1.1"], "visibility_timeout_ms": 30_000},
}


def _receipt(index: int) -> object:
    return f"0.{index}.1"


RECEIPTS: dict[str, Callable[[int], object]] = {"receipts": _receipt}


def _group_receive(params: Mapping[str, object], limits: Limits) -> object:
    return GroupReceive.parse(params, "g", limits)


def _broker_receive(params: Mapping[str, object], limits: Limits) -> object:
    return BrokerReceive.parse(params, "g", limits)


def _settle(action: str, params: Mapping[str, object], limits: Limits) -> object:
    return SettleRequest.parse(params, "g", action, limits)


def _broker_settle(action: str, params: Mapping[str, object], limits: Limits) -> object:
    return SettleRequest.parse(params, "g", action, limits).of_partition(params, limits)


def _mark_dead_lettered(params: Mapping[str, object], limits: Limits) -> object:
    return MarkDeadLettered.parse(params, "g", limits)


def _redrive(params: Mapping[str, object], limits: Limits) -> object:
    return RedriveRequest.parse(params, "g", limits)


def _broker_redrive(params: Mapping[str, object], limits: Limits) -> object:
    return GroupRedrive.parse(params, "g", limits)


def _letter(index: int) -> object:
    return {"offset": index, "delivery_count": 1, "key": None}


M, B = Node.MANAGER, Node.BROKER
PARSED = [
    Parsed(
        M,
        "POST",
        "/topics",
        CreateTopic.parse,
        {
            "name": "t",
            "partitions": 1,
            "replication_factor": 3,
            "retention_ms": 60_000,
            "retention_bytes": 1_000_000,
            "min_insync_replicas": 1,
        },
    ),
    Parsed(M, "GET", "/partitions", TopicRef.parse, {"topic": "orders"}),
    Parsed(M, "POST", "/brokers/drain", BrokerRef.parse, {"broker_id": 4}),
    Parsed(M, "DELETE", "/brokers/drain", BrokerRef.parse, {"broker_id": 4}),
    Parsed(M, "DELETE", "/brokers", BrokerRef.parse, {"broker_id": 4}),
    Parsed(
        M,
        "POST",
        "/managers",
        ManagerRef.parse,
        {"manager_id": 4, "http_url": "http://h:1", "raft_address": "h:2"},
    ),
    Parsed(M, "DELETE", "/managers", ManagerRef.parse_id, {"manager_id": 4}),
    Parsed(M, "POST", "/managers/proof", AddressChallenge.parse, {"nonce": "ab" * 20}),
    Parsed(M, "GET", "/lag", TopicRef.parse, {"topic": "orders"}),
    Parsed(B, "GET", "/lag", TopicRef.parse, {"topic": "orders"}),
    Parsed(B, "GET", "/groups", TopicRef.parse, {"topic": "orders"}),
    Parsed(
        B,
        "POST",
        "/leadership",
        ReplicaRef.parse,
        {"topic": "orders", "partition_id": 0, "raft_address": "127.0.0.1:17401"},
    ),
    Parsed(M, "POST", "/partitions", TopicRef.parse, {"topic": "orders"}),
    Parsed(
        M,
        "POST",
        "/producers",
        RegisterProducer.parse,
        {"topic": "orders", "producer_id": "p", "partition_count": 1},
    ),
    Parsed(
        M,
        "POST",
        "/consumers",
        RegisterConsumer.parse,
        {"topic": "orders", "partition_id": 0, "consumer_id": "c"},
    ),
    Parsed(
        M,
        "POST",
        "/brokers",
        RegisterBroker.parse,
        {
            "broker_id": 1,
            "address": "http://b1",
            "raft_host": "h",
            "raft_port_min": 1,
            "raft_port_max": 65535,
        },
    ),
    Parsed(
        M,
        "POST",
        "/keys",
        CreateKeyRequest.parse,
        {"role": "admin", "topics": ["orders"], "name": "n"},  # topics: checked, not needed
        items={"topics": lambda i: f"t{i}"},
    ),
    Parsed(
        M,
        "POST",
        "/groups",
        CreateGroup.parse,
        {
            "topic": "orders",
            "group": "g",
            "visibility_timeout_ms": 30_000,
            "max_deliveries": 5,
            "ordering": "key",
        },
    ),
    Parsed(  # a dead-letter topic needs max_deliveries >= 1: probed above, without one
        M,
        "POST",
        "/groups",
        CreateGroup.parse,
        {"topic": "orders", "group": "g", "dead_letter_topic": "dead", "max_deliveries": 5},
        fixed=frozenset({"max_deliveries"}),
    ),
    Parsed(M, "GET", "/groups", ListGroups.parse, {"topic": "orders"}),
    Parsed(M, "POST", "/keys/revoke", KeyRef.parse, {"key_id": "0123456789ab"}),
    Parsed(M, "POST", "/keys/verify", VerifyKey.parse, {"key_id": "0123456789ab", "key_hash": "a"}),
    Parsed(
        M, "POST", "/clients/verify", VerifyClient.parse, {"kind": "producer", "client_id": "p"}
    ),
    Parsed(M, "POST", "/logs", _manager_produce, PRODUCE_ONE, branch=0),
    Parsed(
        M, "POST", "/logs", _manager_produce, PRODUCE_MANY, branch=1, items={"messages": _message}
    ),
    Parsed(M, "GET", "/logs", Pop.parse, {**POP, "partition_count": "1"}, mode="pop"),
    Parsed(M, "GET", "/logs", Fetch.parse, FETCH, mode="fetch"),
    Parsed(B, "POST", "/partitions", parse_replica_spec, SPEC, items={"replicas": _replica}),
    Parsed(
        B,
        "DELETE",
        "/partitions",
        ReplicaRef.parse,
        {"topic": "orders", "partition_id": 0, "raft_address": "127.0.0.1:17401"},
    ),
    Parsed(
        B,
        "POST",
        "/partitions/members",
        ReplaceMember.parse,
        {"spec": SPEC, "moved_replica_id": 1, "removed": "127.0.0.1:17499", "removed_alive": True},
    ),
    Parsed(
        B,
        "POST",
        "/consumers",
        ReplicaConsumer.parse,
        {"topic": "orders", "partition_id": 0, "consumer_id": "c"},
    ),
    Parsed(
        B,
        "GET",
        "/checksum",
        ChecksumRange.parse,
        {"topic": "orders", "partition_id": "0", "start": "0", "end": str(INT_MAX)},
    ),
    Parsed(B, "POST", "/logs", Produce.parse_one_partition, PRODUCE_ONE, branch=0),
    Parsed(
        B,
        "POST",
        "/logs",
        Produce.parse_one_partition,
        PRODUCE_MANY,
        branch=1,
        items={"messages": _message},
    ),
    Parsed(
        B,
        "GET",
        "/logs",
        _broker_pop,
        {**POP, "topic": "orders", "partition_id": "0", "partition_count": "1"},
        mode="pop",
    ),
    Parsed(B, "GET", "/logs", Fetch.parse, FETCH, mode="fetch"),
    Parsed(B, "GET", "/logs/stream", Fetch.parse, FETCH),
    Parsed(M, "GET", "/groups/{group}/messages", _group_receive, RECEIVE),
    Parsed(B, "GET", "/groups/{group}/messages", _broker_receive, BROKER_RECEIVE),
    Parsed(B, "GET", "/dead-letters", DeadLettersQuery.parse, {"max_messages": "100"}),
    Parsed(
        B,
        "POST",
        "/groups/{group}/dead-lettered",
        _mark_dead_lettered,
        {"topic": "orders", "partition_id": 0, "offsets": [0]},
    ),
    Parsed(
        M,
        "POST",
        "/groups/{group}/redrive",
        _redrive,
        {"topic": "orders", "max_messages": 10, "request_id": "r"},
    ),
    Parsed(
        B,
        "POST",
        "/groups/{group}/redrive",
        _broker_redrive,
        {
            "topic": "orders",
            "partition_id": 0,
            "max_messages": 10,
            "request_id": "r",
            "letters": [_letter(0)],
        },
        items={"letters": _letter},
    ),
    *(
        Parsed(
            node, "POST", f"/groups/{{group}}/{action}", parse, body, items=RECEIPTS, fixed=fixed
        )
        for action in SETTLE_ACTIONS
        for node, parse, body, fixed in (
            (M, partial(_settle, action), SETTLE[action], frozenset[str]()),
            # Every receipt must name the partition: its bounds are partition_ref's, probed
            # with the other broker requests.
            (
                B,
                partial(_broker_settle, action),
                {**SETTLE[action], "partition_id": 0},
                frozenset({"partition_id"}),
            ),
        )
    ),
]


def _id(parsed: Parsed) -> str:
    variant = parsed.mode or ("" if parsed.branch is None else f"branch {parsed.branch}")
    return f"{parsed.node.value} {parsed.method} {parsed.path} {variant}".strip()


def test_every_operation_with_input_has_its_parser() -> None:
    """(The load balancer's are the manager's: it forwards them.)"""
    with_input = {
        (node, method, path)
        for node, method, path, operation in _each_operation()
        if "requestBody" in operation
        or any(_object(p)["in"] == "query" for p in _list(operation.get("parameters", [])))
    }
    assert with_input - {
        (n, m, p) for n, m, p, _ in _each_operation() if n is Node.LOAD_BALANCER
    } == {(p.node, p.method, p.path) for p in PARSED}


def _variants() -> dict[str, list[Parsed]]:
    """``PARSED`` by operation (and mode): a body's variants together."""
    grouped: dict[str, list[Parsed]] = {}
    for parsed in PARSED:
        key = f"{parsed.node.value} {parsed.method} {parsed.path} {parsed.mode or ''}".strip()
        grouped.setdefault(key, []).append(parsed)
    return grouped


@pytest.mark.parametrize("variants", list(_variants().values()), ids=list(_variants()))
def test_the_parser_reads_the_documented_fields(variants: list[Parsed]) -> None:
    """Every field name its parser asks for (found or not), over each variant of the body;
    and every documented field is set in some variant, so the other tests probe it."""
    read: set[str] = set()
    for parsed in variants:
        parsed.parse(_recording(parsed.valid, "", read), LIMITS)
    documented = _documented_fields(variants[0])
    assert read == documented
    top_level = {name for name in documented if "." not in name and "[]" not in name}
    assert set().union(*(parsed.valid for parsed in variants)) == top_level


@pytest.mark.parametrize("parsed", PARSED, ids=_id)
def test_required_fields_are_what_the_parser_requires(parsed: Parsed) -> None:
    required = _required(parsed)
    minimal = {name: parsed.valid[name] for name in required}
    parsed.parse(minimal, LIMITS)  # everything else is optional
    for name in required:
        _refused(parsed, {k: v for k, v in minimal.items() if k != name}, f"without {name}")


@pytest.mark.parametrize("parsed", PARSED, ids=_id)
def test_bounds_and_types_are_what_the_parser_checks(parsed: Parsed) -> None:
    schemas = _field_schemas(parsed)
    for name in [n for n in parsed.valid if n not in parsed.fixed]:
        for value, accepted in _probes(parsed, name, schemas[name]):
            params = {**parsed.valid, name: value}
            if accepted:
                parsed.parse(params, LIMITS)
            else:
                _refused(parsed, params, f"{name}={_short(value)}")


def _refused(parsed: Parsed, params: Mapping[str, object], what: str) -> None:
    with pytest.raises(RaftQError) as caught:
        parsed.parse(params, LIMITS)
    assert 400 <= caught.value.status < 500, what


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) < 40 else f"{text[:30]}... ({len(text)} characters)"


def _probes(parsed: Parsed, name: str, schema: Schema) -> Iterator[tuple[object, bool]]:
    """Values of one field and whether the parser must take them: at and past each bound,
    every enum value and one more, a wrong type."""
    as_text = _in_query(parsed)  # query parameters arrive as strings
    kind = schema.get("type")
    if kind == "integer":
        low, high = int(str(schema["minimum"])), int(str(schema["maximum"]))
        for value, accepted in ((low, True), (low - 1, False), (high, True), (high + 1, False)):
            yield (str(value) if as_text else value), accepted
        yield "x", False
    elif kind == "string" and "enum" in schema:
        for allowed in _list(schema["enum"]):
            yield allowed, True
        yield "not-" + str(_list(schema["enum"])[0]), False
    elif kind == "string":
        yield from _string_probes(schema)
        if not as_text:
            yield 5, False
    elif kind == "array":
        make = parsed.items.get(name)
        if make is not None:
            yield from _array_probes(schema, make)
        yield "x", False


def _string_probes(schema: Schema) -> Iterator[tuple[object, bool]]:
    low = int(str(schema.get("minLength", 0)))
    yield _text(schema, max(low, 1)), True
    if low > 0:
        yield "", False
    if "maxLength" in schema:
        high = int(str(schema["maxLength"]))
        yield _text(schema, high), True
        yield _text(schema, high + 1), False
    if "pattern" in schema:
        yield "~ ~", False


def _text(schema: Schema, length: int) -> str:
    """A string of ``length`` characters that matches the schema's pattern."""
    pattern = str(schema.get("pattern", ""))
    prefix = "http://" if pattern.startswith("^https?://") else ""
    suffix = ":1" if pattern.endswith(":[0-9]{1,5}$") else ""  # host:port
    text = prefix + "a" * max(length - len(prefix) - len(suffix), 0) + suffix
    assert re.search(str(schema.get("pattern", "")), text)
    return text


def _array_probes(schema: Schema, make: Callable[[int], object]) -> Iterator[tuple[object, bool]]:
    low, high = int(str(schema["minItems"])), int(str(schema["maxItems"]))
    yield [make(i) for i in range(low)], True
    yield [make(i) for i in range(high)], True
    yield [make(i) for i in range(high + 1)], False
    if low > 0:
        yield [], False


# --- reading the document --------------------------------------------------------------------


def _operation(parsed: Parsed) -> Schema:
    path_item = _object(_object(api_document(parsed.node)["paths"])[parsed.path])
    return _object(path_item[parsed.method.lower()])


def _mode(parsed: Parsed) -> Schema:
    modes = _list(_operation(parsed)["x-raftq-modes"])
    (mode,) = [_object(m) for m in modes if _object(m)["name"] == parsed.mode]
    return mode


def _body(parsed: Parsed) -> Schema:
    body = _object(_object(_operation(parsed)["requestBody"])["content"])["application/json"]
    return _resolve(_object(body)["schema"])


def _in_query(parsed: Parsed) -> bool:
    return parsed.method == "GET"


def _parameters(parsed: Parsed) -> list[Schema]:
    """The query's (a path's ``{name}`` segments are the route's, not the parser's)."""
    found = [_object(p) for p in _list(_operation(parsed)["parameters"])]
    return [p for p in found if p["in"] == "query"]


def _field_schemas(parsed: Parsed) -> dict[str, Schema]:
    if _in_query(parsed):
        return {str(p["name"]): _resolve(p["schema"]) for p in _parameters(parsed)}
    return {name: _resolve(schema) for name, schema in _object(_body(parsed)["properties"]).items()}


def _required(parsed: Parsed) -> list[str]:
    if parsed.mode is not None:
        return [str(name) for name in _list(_mode(parsed)["required"])]
    if _in_query(parsed):
        return [str(p["name"]) for p in _parameters(parsed) if p["required"] is True]
    body = _body(parsed)
    required = [str(name) for name in _list(body.get("required", []))]
    if parsed.branch is not None:
        branch = _object(_list(body["oneOf"])[parsed.branch])
        required += [str(name) for name in _list(branch["required"])]
    return required


def _documented_fields(parsed: Parsed) -> set[str]:
    if parsed.mode is not None:
        return {str(name) for name in _list(_mode(parsed)["parameters"])}
    if _in_query(parsed):
        return {str(p["name"]) for p in _parameters(parsed)}
    return _nested_fields(_body(parsed), "")


def _nested_fields(schema: Schema, path: str) -> set[str]:
    """``a``, ``a.b`` for an object field, ``a[].b`` for an array of objects."""
    found: set[str] = set()
    for part in [_resolve(s) for s in _list(schema.get("allOf", []))]:
        found |= _nested_fields(part, path)
    for name, sub in _object(schema.get("properties", {})).items():
        at = f"{path}.{name}" if path else name
        found.add(at)
        sub_schema = _resolve(sub)
        if sub_schema.get("type") == "array":
            found |= _nested_fields(_resolve(sub_schema["items"]), f"{at}[]")
        else:
            found |= _nested_fields(sub_schema, at)
    return found


def _resolve(schema: object) -> Schema:
    found = _object(schema)
    while "$ref" in found:
        document: object = api_document(Node.MANAGER)
        for part in str(found["$ref"]).removeprefix("#/").split("/"):
            document = _object(document)[part]
        found = _object(document)
    return found


def _object(value: object) -> dict[str, object]:
    assert isinstance(value, dict)
    return value


def _list(value: object) -> list[object]:
    assert isinstance(value, list)
    return value


# --- what a parser reads -----------------------------------------------------------------------


class _Reads(dict[str, object]):
    """A request mapping that notes every field name a parser asks for (found or not)."""

    def __init__(self, items: dict[str, object], path: str, read: set[str]) -> None:
        super().__init__(items)
        self._path = path
        self._read = read

    def _note(self, name: object) -> None:
        self._read.add(f"{self._path}.{name}" if self._path else str(name))

    def get(self, name: str, default: object = None) -> object:
        self._note(name)
        return super().get(name, default)

    def __contains__(self, name: object) -> bool:
        self._note(name)
        return super().__contains__(name)

    def __getitem__(self, name: str) -> object:
        self._note(name)
        return super().__getitem__(name)


def _recording(value: object, path: str, read: set[str]) -> _Reads:
    items = {
        name: _wrap(item, f"{path}.{name}" if path else name, read)
        for name, item in _object(value).items()
    }
    return _Reads(items, path, read)


def _wrap(value: object, path: str, read: set[str]) -> object:
    if isinstance(value, dict):
        return _recording(value, path, read)
    if isinstance(value, list):
        return [_wrap(item, f"{path}[]", read) for item in value]
    return value
