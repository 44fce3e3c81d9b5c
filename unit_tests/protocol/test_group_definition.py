"""``CreateGroup`` and ``ListGroups`` (``protocol.requests``): defaults, nulls and the rules
between fields that the API document states only in words. Bounds and types of each field
are checked against the document by ``test_openapi``."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import CreateGroup, ListGroups, Ordering
from protocol.limits import Limits, LimitsError
from protocol.requests import QueryText

LIMITS = Limits()


def test_absent_or_null_fields_take_their_defaults() -> None:
    expected = CreateGroup("orders", "g", LIMITS.group_visibility_timeout_ms_default)
    assert CreateGroup.parse({"topic": "orders", "group": "g"}, LIMITS) == expected
    nulls = dict.fromkeys(("visibility_timeout_ms", "max_deliveries", "dead_letter_topic"))
    params = {"topic": "orders", "group": "g", "ordering": None, **nulls}
    assert CreateGroup.parse(params, LIMITS) == expected
    assert expected.max_deliveries == 0 and expected.ordering is Ordering.NONE


def test_every_field_is_read() -> None:
    params = {
        "topic": "orders",
        "group": "billing.v2",
        "visibility_timeout_ms": 100,
        "max_deliveries": 1,
        "dead_letter_topic": "orders.dead",
        "ordering": "key",
    }
    assert CreateGroup.parse(params, LIMITS) == CreateGroup(
        "orders", "billing.v2", 100, 1, "orders.dead", Ordering.KEY
    )


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"dead_letter_topic": "orders", "max_deliveries": 3}, "another topic"),
        ({"dead_letter_topic": "dead"}, "max_deliveries"),
        ({"dead_letter_topic": "dead", "max_deliveries": 0}, "max_deliveries"),
        ({"ordering": "fifo"}, "'none', 'key'"),
        ({"ordering": 1}, "'none', 'key'"),
        ({"group": "a/b"}, "field 'group' may hold only"),
        ({"dead_letter_topic": ""}, "field 'dead_letter_topic' must not be empty"),
    ],
)
def test_rules_between_fields_and_bad_values_are_field_errors(
    extra: dict[str, object], words: str
) -> None:
    with pytest.raises(RaftQError) as caught:
        CreateGroup.parse({"topic": "orders", "group": "g", **extra}, LIMITS)
    assert caught.value.code is ErrorCode.INVALID_FIELD
    assert words in caught.value.message


def test_a_listing_names_one_topic_or_none() -> None:
    assert ListGroups.parse({}, LIMITS) == ListGroups(None)
    assert ListGroups.parse({"topic": QueryText("orders")}, LIMITS) == ListGroups("orders")
    with pytest.raises(RaftQError):
        ListGroups.parse({"topic": QueryText("")}, LIMITS)


def test_the_default_lease_must_lie_within_the_bounds() -> None:
    with pytest.raises(LimitsError, match="group_visibility_timeout_ms_default"):
        Limits(group_visibility_timeout_ms_default=50).validate()
    with pytest.raises(LimitsError, match="group_visibility_timeout_ms_default"):
        Limits().with_overrides({"group_visibility_timeout_ms_max": "20000"})
