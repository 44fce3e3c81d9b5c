from __future__ import annotations

from collections.abc import Iterator

import pytest

from unit_tests.raftq.fake_service import FakeService


@pytest.fixture
def service() -> Iterator[FakeService]:
    fake = FakeService()
    fake.default("POST", "/producers", lambda _p: (201, {"producer_id": "p-1"}))
    fake.default(
        "POST", "/consumers", lambda p: (201, {"consumer_id": p.get("consumer_id", "c-1")})
    )
    yield fake
    fake.stop()
