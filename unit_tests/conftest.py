"""Shared fixtures. PostgreSQL is required (``install_db.sh`` installs and starts it; the
test command runs it first): a missing server fails the tests rather than skipping them."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

DEFAULT_POSTGRES_URL = "postgresql://raftq:raftq@127.0.0.1:5432/raftq_test"


@pytest.fixture(scope="session")
def postgres_url() -> str:
    url = os.environ.get("RAFTQ_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as exc:
        pytest.fail(f"PostgreSQL at {url} is not reachable (run ./install_db.sh): {exc}")
    finally:
        engine.dispose()
    return url
