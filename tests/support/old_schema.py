"""A database as the first release (schema version 1) wrote it, for the upgrade tests."""

from __future__ import annotations

from sqlalchemy import Column, MetaData, Table, text

from db.models import Base, RunStatus


def version_1_metadata() -> MetaData:
    """The schema as version 1 had it: no worker tables or columns, services keyed by name."""
    added = {"runs": {"requires_labels", "pinned_worker", "worker_name", "worker_hardware"}, "services": {"worker"}}
    metadata = MetaData()
    for table in Base.metadata.sorted_tables:
        if table.name in ("workers", "run_claims"):
            continue
        columns: list[Column] = [c._copy() for c in table.columns if c.name not in added.get(table.name, set())]
        Table(table.name, metadata, *columns)
    return metadata


def version_1_database(engine) -> None:
    """Make ``engine``'s empty database one the first release wrote: one done run, one service."""
    old = version_1_metadata()
    with engine.begin() as connection:
        old.create_all(connection)
        connection.execute(text("INSERT INTO schema_version (id, version) VALUES (1, 1)"))
        connection.execute(
            old.tables["runs"]
            .insert()
            .values(
                spec={},
                backend="naive",
                model="m",
                workload="number-story",
                load_kind="constant-vus",
                duration_s=20,
                max_tokens=16,
                random_seed=1,
                status=RunStatus.DONE,
                req_per_s=2.5,
            )
        )
        connection.execute(
            old.tables["services"]
            .insert()
            .values(name="naive", kind="naive", state="running", pid=1234, config={"model": "m"})
        )
