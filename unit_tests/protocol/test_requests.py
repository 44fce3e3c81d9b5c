"""Request parsing: every malformed input is refused with a precise error before anything
is proposed."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import (
    CreateTopic,
    Fetch,
    Pop,
    Produce,
    QueryText,
    RegisterBroker,
    parse_replica_spec,
)
from protocol.routing import partition_for_key, partition_for_unkeyed
from protocol.types import NewMessage

LIMITS = Limits(message_bytes_max=10, key_bytes_max=4, request_messages_max=3)


def refused(parse: object, params: dict[str, object]) -> ErrorCode:
    with pytest.raises(RaftQError) as info:
        parse.parse(params, LIMITS)  # type: ignore[attr-defined]
    return info.value.code


def test_produce_single_and_batch() -> None:
    one = Produce.parse({"topic": "t", "message": "hi", "key": "k", "producer_id": "p"}, LIMITS)
    assert one.messages == (NewMessage(value="hi", key="k"),) and not one.is_batch
    many = Produce.parse(
        {
            "topic": "t",
            "messages": [{"message": "a"}, {"message": "b", "key": "k"}],
            "partition_id": 1,
            "producer_id": "p",
            "sequence": 4,
        },
        LIMITS,
    )
    assert many.is_batch and many.partition_id == 1 and many.sequence == 4
    assert Produce.parse(many.to_json(), LIMITS) == many
    # In a JSON body a number is a number; only the query string's text may spell one.
    assert refused(Produce, {**one.to_json(), "partition_id": "1"}) == ErrorCode.INVALID_FIELD
    from_query = {**one.to_json(), "partition_id": QueryText("1")}
    assert Produce.parse(from_query, LIMITS).partition_id == 1


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"topic": "t"}, ErrorCode.INVALID_FIELD),
        ({"topic": "t", "message": "a", "messages": []}, ErrorCode.INVALID_FIELD),
        ({"topic": "t", "message": 5}, ErrorCode.INVALID_FIELD),
        ({"topic": "t", "message": "a", "key": 3}, ErrorCode.INVALID_FIELD),
        ({"topic": "t", "message": "x" * 11}, ErrorCode.TOO_LARGE),
        ({"topic": "t", "message": "a", "key": "kkkkk"}, ErrorCode.TOO_LARGE),
        ({"topic": "t", "messages": [{"message": "a"}] * 4}, ErrorCode.TOO_LARGE),
        ({"topic": "t", "messages": ["a"]}, ErrorCode.INVALID_FIELD),
        ({"topic": "bad topic", "message": "a"}, ErrorCode.INVALID_FIELD),
        ({"topic": "t", "message": "a", "sequence": 1}, ErrorCode.INVALID_FIELD),
        (
            {"topic": "t", "message": "a", "producer_id": "p", "sequence": -1},
            ErrorCode.INVALID_FIELD,
        ),
        ({"topic": "t", "message": "a", "partition_id": True}, ErrorCode.INVALID_FIELD),
        ({"topic": "t", "message": "a", "partition_id": "1.5"}, ErrorCode.INVALID_FIELD),
    ],
)
def test_bad_produce_requests(params: dict[str, object], code: ErrorCode) -> None:
    assert refused(Produce, params) == code


def test_pop_fetch_and_topic_defaults_and_bounds() -> None:
    assert Pop.parse({"consumer_id": "c"}, LIMITS).max_messages == 1
    assert (
        Fetch.parse({"topic": "t", "partition_id": 0, "offset": QueryText("3")}, LIMITS).offset == 3
    )
    assert refused(Pop, {"consumer_id": "c", "max_messages": 0}) == ErrorCode.INVALID_FIELD
    assert refused(Fetch, {"topic": "t", "partition_id": 0}) == ErrorCode.INVALID_FIELD
    topic = CreateTopic.parse({"name": "t"}, LIMITS)
    assert (topic.partitions, topic.replication_factor) == (1, 3)
    assert refused(CreateTopic, {"name": "t", "partitions": 0}) == ErrorCode.INVALID_FIELD
    assert refused(CreateTopic, {"name": "t", "replication_factor": 5}) == ErrorCode.INVALID_FIELD


def _replica(index: int) -> dict[str, object]:
    return {
        "replica_id": index,
        "broker_id": index,
        "address": f"http://b{index}",
        "raft_address": f"h:{9000 + index}",
    }


def test_broker_registration_and_replica_spec() -> None:
    params = {
        "broker_id": 1,
        "address": "http://h:1/",
        "raft_host": "h",
        "raft_port_min": 10,
        "raft_port_max": 20,
    }
    assert RegisterBroker.parse(params, LIMITS).address == "http://h:1"
    assert refused(RegisterBroker, {**params, "raft_port_max": 5}) == ErrorCode.INVALID_FIELD
    assert refused(RegisterBroker, {**params, "address": "h:1"}) == ErrorCode.INVALID_FIELD
    replicas = [_replica(i) for i in range(3)]
    spec = parse_replica_spec(
        {"topic": "t", "partition_id": 0, "replica_id": 2, "replicas": replicas}, LIMITS
    )
    assert spec.partners == ("h:9000", "h:9001")
    assert parse_replica_spec(spec.to_json(), LIMITS) == spec
    with pytest.raises(RaftQError):
        parse_replica_spec(
            {"topic": "t", "partition_id": 0, "replica_id": 0, "replicas": [replicas[1]]}, LIMITS
        )


def test_a_replica_spec_names_a_drains_leaving_replica() -> None:
    """``ReplicaSpec.leaving``: the new replica's Raft node knows it and peers copy from
    it; it is not part of a spec's identity, and it may not share a Raft address."""
    replicas = [_replica(i) for i in range(3)]
    leaving = {"replica_id": 1, "broker_id": 7, "address": "http://b7", "raft_address": "h:9007"}
    base = {"topic": "t", "partition_id": 0, "replica_id": 1, "replicas": replicas}
    spec = parse_replica_spec({**base, "leaving": leaving}, LIMITS)
    assert spec.leaving is not None and spec.leaving.raft_address == "h:9007"
    assert spec.raft_partners == ("h:9000", "h:9002", "h:9007")
    assert [p.raft_address for p in spec.peers] == ["h:9000", "h:9002", "h:9007"]
    assert parse_replica_spec(spec.to_json(), LIMITS).leaving == spec.leaving
    plain = parse_replica_spec(base, LIMITS)
    assert plain == spec and plain.raft_partners == plain.partners
    for bad in ({**leaving, "raft_address": "h:9000"}, {**leaving, "replica_id": 3}, "h:9007"):
        with pytest.raises(RaftQError) as caught:
            parse_replica_spec({**base, "leaving": bad}, LIMITS)
        assert caught.value.code is ErrorCode.INVALID_FIELD


@pytest.mark.parametrize("raft_address", ["h", "h:", ":9000", "h:x", "h:0", "h:65536", "h:9 0"])
def test_a_replica_spec_refuses_a_raft_address_that_is_not_host_and_port(
    raft_address: str,
) -> None:
    """pysyncobj raised on such an address when the replica was built, after the broker had
    recorded the spec: a 500, and a replica that fails again at every start. (Found by the
    broker's API fuzz test.)"""
    replica = {"replica_id": 0, "broker_id": 1, "address": "http://b1"}
    spec = {"topic": "t", "partition_id": 0, "replica_id": 0}
    with pytest.raises(RaftQError) as caught:
        parse_replica_spec(
            {**spec, "replicas": [{**replica, "raft_address": raft_address}]}, LIMITS
        )
    assert caught.value.code is ErrorCode.INVALID_FIELD
    parse_replica_spec({**spec, "replicas": [{**replica, "raft_address": "h:65535"}]}, LIMITS)


def test_key_routing_is_stable_and_spread() -> None:
    # A fixed value (CRC-32 of 'a'): a change of hash function would re-route existing keys.
    assert partition_for_key("a", 7) == 0xE8B7BE43 % 7
    counts = [0] * 4
    for i in range(4000):
        counts[partition_for_key(f"key-{i}", 4)] += 1
    assert min(counts) > 800
    assert partition_for_unkeyed("p:1", 4) == partition_for_unkeyed("p:1", 4)
    with pytest.raises(ValueError):
        partition_for_key("a", 0)


def test_min_insync_replicas_defaults_to_a_majority_and_never_exceeds_the_replication_factor() -> (
    None
):
    assert CreateTopic.parse({"name": "t"}, Limits()).min_insync_replicas == 2
    one = CreateTopic.parse({"name": "t", "replication_factor": 1}, Limits())
    assert one.min_insync_replicas == 1
    every = CreateTopic.parse({"name": "t", "min_insync_replicas": 3}, Limits())
    assert every.min_insync_replicas == 3
    with pytest.raises(RaftQError) as refused:
        CreateTopic.parse(
            {"name": "t", "replication_factor": 2, "min_insync_replicas": 3}, Limits()
        )
    assert refused.value.code is ErrorCode.INVALID_FIELD
    assert "must not exceed the replication factor (2)" in refused.value.message


def test_headers_are_parsed_sorted_and_counted_in_the_message_size() -> None:
    limits = Limits(message_bytes_max=12, key_bytes_max=4, message_headers_max=2)
    one = Produce.parse({"topic": "t", "message": "v", "headers": {"b": "2", "a": "1"}}, limits)
    assert one.messages[0].headers == (("a", "1"), ("b", "2"))
    assert Produce.parse(one.to_json(), limits).messages == one.messages
    at_bound = {"topic": "t", "message": "vvvvvv", "key": "kk", "headers": {"h": "xyz"}}
    assert Produce.parse(at_bound, limits).messages[0].headers == (("h", "xyz"),)  # 6+2+4
    with pytest.raises(RaftQError) as over:
        Produce.parse({**at_bound, "message": "vvvvvvv"}, limits)
    assert over.value.code == ErrorCode.TOO_LARGE


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"h": 1}, ErrorCode.INVALID_FIELD),
        ({"h": None}, ErrorCode.INVALID_FIELD),
        (["h", "x"], ErrorCode.INVALID_FIELD),
        ({"": "x"}, ErrorCode.INVALID_FIELD),
        ({"n" * 257: "x"}, ErrorCode.INVALID_FIELD),
        ({"raftq-origin-topic": "forged"}, ErrorCode.INVALID_FIELD),
        ({"RaftQ-Group": "forged"}, ErrorCode.INVALID_FIELD),
        ({f"h{i}": "" for i in range(33)}, ErrorCode.TOO_LARGE),
    ],
)
def test_bad_headers_are_refused(headers: object, code: ErrorCode) -> None:
    limits = Limits()
    with pytest.raises(RaftQError) as info:
        Produce.parse({"topic": "t", "messages": [{"message": "v", "headers": headers}]}, limits)
    assert info.value.code == code
    assert "messages[0]" in info.value.message
