"""Options, offsets and planning: plain functions, no Spark, no cluster."""

from __future__ import annotations

import pytest

from spark_jobs.offsets import (
    EARLIEST,
    LATEST,
    DataLossError,
    cap_offsets,
    check_start,
    offsets_from_json,
    offsets_to_json,
    parse_offset_spec,
    resolve,
)
from spark_jobs.options import (
    Endpoint,
    OptionError,
    endpoint_options,
    parse_read_options,
    parse_write_options,
)
from spark_jobs.planning import OffsetRange, offset_ranges, plan, split

URL = "http://127.0.0.1:1"


def test_read_options_are_case_insensitive_and_default_like_kafka() -> None:
    batch = parse_read_options(
        {"RAFTQ.URL": URL + "/", "Subscribe": "a, b", "path": "ignored"}, streaming=False
    )
    assert batch.endpoint == Endpoint(URL) and batch.topics == ("a", "b")
    assert batch.starting_offsets == "earliest" and batch.ending_offsets == "latest"
    assert batch.fail_on_data_loss and batch.min_partitions is None
    stream = parse_read_options(
        {"raftq.url": URL, "subscribe": "a", "MAXOFFSETSPERTRIGGER": "5"}, streaming=True
    )
    assert stream.starting_offsets == "latest" and stream.max_offsets_per_trigger == 5
    assert batch.direct and stream.direct
    assert not parse_read_options(
        {"raftq.url": URL, "subscribe": "a", "raftq.Direct": "FALSE"}, streaming=False
    ).direct


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a"}, False, "raftq.url"),
        ({"raftq.url": "127.0.0.1:1", "subscribe": "a"}, False, "http"),
        ({"raftq.url": URL}, False, "subscribe"),
        ({"raftq.url": URL, "subscribe": "a,a"}, False, "distinct"),
        ({"raftq.url": URL, "subscribe": "a", "raftq.bogus": "1"}, False, "unsupported"),
        ({"raftq.url": URL, "subscribe": "a", "subscribePattern": "a.*"}, False, "unsupported"),
        ({"raftq.url": URL, "subscribe": "a", "failOnDataLoss": "yes"}, False, "true or false"),
        ({"raftq.url": URL, "subscribe": "a", "minPartitions": "0"}, False, "minpartitions"),
        ({"raftq.url": URL, "subscribe": "a", "endingOffsets": "latest"}, True, "batch"),
        ({"raftq.url": URL, "subscribe": "a", "maxOffsetsPerTrigger": "9"}, False, "stream"),
        ({"raftq.url": URL, "subscribe": "a", "endingOffsets": "earliest"}, False, "earliest"),
        ({"raftq.url": URL, "subscribe": "a", "startingOffsets": "{bad"}, False, "JSON"),
        ({"raftq.url": URL, "subscribe": "a", "SUBSCRIBE": "b"}, False, "twice"),
        ({"raftq.url": URL, "subscribe": "a", "raftq.direct": "no"}, False, "true or false"),
    ],
)
def test_bad_read_options_are_refused_by_name(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse_read_options(options, streaming=streaming)


def test_write_options() -> None:
    parsed = parse_write_options({"raftq.url": URL, "TOPIC": "t", "raftq.batchMessagesMax": "10"})
    assert (parsed.topic, parsed.batch_messages_max) == ("t", 10)
    assert parsed.job_id  # a fresh one per write
    assert parse_write_options({"raftq.url": URL, "raftq.jobId": "j"}).job_id == "j"
    assert parsed.direct
    assert not parse_write_options({"raftq.url": URL, "raftq.direct": "false"}).direct
    with pytest.raises(OptionError, match="batchmessagesmax"):
        parse_write_options({"raftq.url": URL, "raftq.batchMessagesMax": "10001"})


def test_the_api_key_goes_with_the_endpoint_and_never_into_a_repr() -> None:
    keyed = parse_write_options({"raftq.url": URL, "RAFTQ.API_KEY": "rq_secret"})
    assert keyed.endpoint == Endpoint(URL, "rq_secret")
    assert "rq_secret" not in repr(keyed)
    read = parse_read_options(
        {"raftq.url": URL, "subscribe": "a", "raftq.api_key": " "}, streaming=False
    )
    assert read.endpoint.api_key is None  # blank: none


def test_the_tls_ca_goes_with_the_endpoint_to_the_jobs_reads_and_writes() -> None:
    given = {"raftq.url": "https://lb:17100", "raftq.tls_ca": "/etc/raftq/ca.pem"}
    endpoint = parse_write_options(given).endpoint
    assert endpoint == Endpoint("https://lb:17100", None, "/etc/raftq/ca.pem")
    assert endpoint_options(endpoint) == given
    read = parse_read_options({**given, "subscribe": "a"}, streaming=True)
    assert read.endpoint.tls_ca == "/etc/raftq/ca.pem"


def test_kafka_json_offsets_round_trip() -> None:
    offsets = offsets_from_json('{"b": {"1": 7, "0": 3}, "a": {"0": 0}}')
    assert offsets == {"a": {0: 0}, "b": {0: 3, 1: 7}}
    assert offsets_to_json(offsets) == '{"a":{"0":0},"b":{"0":3,"1":7}}'
    assert parse_offset_spec(' {"a": {"0": -2, "1": -1}} ', "x") == {"a": {0: EARLIEST, 1: LATEST}}
    assert parse_offset_spec("LATEST", "x") == "latest"
    for bad in ('{"a": {"0": -3}}', '{"a": {"x": 1}}', '{"a": 1}', "[1]", '{"a": {"0": 1.5}}'):
        with pytest.raises(ValueError):
            parse_offset_spec(bad, "x")
    with pytest.raises(ValueError):
        offsets_from_json('{"a": {"0": -2}}')  # checkpointed offsets are concrete


def test_resolve_words_json_and_missing_partitions() -> None:
    ids = {"a": [0, 1], "b": [0]}
    ends = {"a": {0: 10, 1: 20}, "b": {0: 5}}
    assert resolve("earliest", ids, ends, missing=LATEST) == {"a": {0: 0, 1: 0}, "b": {0: 0}}
    assert resolve("latest", ids, ends, missing=LATEST) == ends
    spec = {"a": {0: 4, 1: EARLIEST}}
    assert resolve(spec, ids, ends, missing=LATEST) == {"a": {0: 4, 1: 0}, "b": {0: 5}}
    assert resolve(spec, ids, ends, missing=EARLIEST)["b"] == {0: 0}
    with pytest.raises(ValueError, match="not subscribed"):
        resolve({"c": {0: 1}}, ids, ends, missing=LATEST)
    with pytest.raises(ValueError, match="no partition"):
        resolve({"a": {5: 1}}, ids, ends, missing=LATEST)


def test_a_start_beyond_the_end_is_data_loss() -> None:
    ends = {"a": {0: 10, 1: 3}}
    assert check_start({"a": {0: 10, 1: 3}}, ends, fail_on_data_loss=True) == (ends, [])
    with pytest.raises(DataLossError, match="beyond"):
        check_start({"a": {1: 4}}, ends, fail_on_data_loss=True)
    with pytest.raises(DataLossError, match="no longer exists"):
        check_start({"a": {2: 0}}, ends, fail_on_data_loss=True)
    fixed, warnings = check_start({"a": {1: 4, 2: 0}}, ends, fail_on_data_loss=False)
    assert fixed == {"a": {1: 0}} and len(warnings) == 2


def test_cap_shares_the_limit_in_proportion_to_backlog() -> None:
    start = {"a": {0: 0, 1: 10}}
    latest = {"a": {0: 30, 1: 20}, "b": {0: 0}}
    assert cap_offsets(start, latest, 1_000) == latest
    capped = cap_offsets(start, latest, 8)  # backlogs 30 and 10
    assert capped == {"a": {0: 6, 1: 12}, "b": {0: 0}}
    # 2.25 and 0.75: the remainder goes to the larger backlog
    assert cap_offsets(start, latest, 3) == {"a": {0: 3, 1: 10}, "b": {0: 0}}
    total = sum(e - start["a"].get(p, 0) for p, e in cap_offsets(start, latest, 7)["a"].items())
    assert total == 7


def test_plan_one_task_per_partition_and_min_partitions_splits() -> None:
    ranges = offset_ranges({"a": {0: 5}}, {"a": {0: 105, 1: 0, 2: 50}})
    assert ranges == [
        OffsetRange("a", 0, 5, 105),
        OffsetRange("a", 1, 0, 0),
        OffsetRange("a", 2, 0, 50),
    ]
    assert plan(ranges, None) == [ranges[0], ranges[2]]
    planned = plan(ranges, 6)
    assert len(planned) == 6 and sum(r.size for r in planned) == 150
    assert next(r for r in planned if r.partition_id == 0).start == 5
    assert split(OffsetRange("a", 0, 0, 10), 3) == [
        OffsetRange("a", 0, 0, 3),
        OffsetRange("a", 0, 3, 6),
        OffsetRange("a", 0, 6, 10),
    ]
    with pytest.raises(ValueError, match="before"):
        offset_ranges({"a": {0: 9}}, {"a": {0: 8}})


def test_earliest_is_the_log_start_and_a_start_below_it_is_data_loss() -> None:
    ids = {"a": [0, 1]}
    ends, starts = {"a": {0: 10, 1: 3}}, {"a": {0: 6, 1: 0}}
    assert resolve("earliest", ids, ends, missing=LATEST, starts=starts) == starts
    spec = {"a": {0: EARLIEST}}
    assert resolve(spec, ids, ends, missing=EARLIEST, starts=starts) == {"a": {0: 6, 1: 0}}
    assert check_start(starts, ends, fail_on_data_loss=True, starts=starts) == (starts, [])
    with pytest.raises(DataLossError, match="below the log start 6"):
        check_start({"a": {0: 2}}, ends, fail_on_data_loss=True, starts=starts)
    fixed, warnings = check_start({"a": {0: 2}}, ends, fail_on_data_loss=False, starts=starts)
    assert fixed == {"a": {0: 6}} and "retention" in warnings[0]
