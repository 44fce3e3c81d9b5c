"""A real 7-process cluster per test module and database kind (SQLite, PostgreSQL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from unit_tests.cluster.harness import Cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

# Each module gets its own port block so that sockets in TIME_WAIT never collide.
BASE_PORTS = {
    "sqlite": CLUSTER_BASE_PORTS["end_to_end_sqlite"],
    "postgresql": CLUSTER_BASE_PORTS["end_to_end_postgresql"],
}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def cluster(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_url: str,
) -> Iterator[Cluster]:
    kind = request.param
    db_url = None
    if kind == "postgresql":
        db_url = (
            make_url(postgres_url)
            .set(database=f"raftq_e2e_{uuid.uuid4().hex[:8]}")
            .render_as_string(hide_password=False)
        )
    offset = getattr(request.module, "PORT_OFFSET", 0)
    instance = Cluster(
        tmp_path_factory.mktemp(f"cluster-{kind}"), BASE_PORTS[kind] + offset, db_url
    )
    instance.up()
    yield instance
    instance.close()
    if db_url is not None:
        _drop_broker_databases(db_url)


def _drop_broker_databases(db_url: str) -> None:
    parsed = make_url(db_url)
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        for broker_id in (1, 2, 3):
            name = f"{parsed.database}_broker_{broker_id}"
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
