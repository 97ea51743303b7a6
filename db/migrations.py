"""Versioned schema changes: a documented, dependency-free equivalent of Alembic.

``schema_version`` holds one integer. ``MIGRATIONS[n]`` moves a database from version
``n`` to ``n + 1`` in one transaction and never drops data; ``upgrade`` applies the
missing ones in order. An empty database is created from the ORM models, which already
have every column, and stamped with the latest version: migrations only ever run on
databases made before them, so they need no "does the column exist" guard.
To change the schema: add a column to the model AND append a migration that adds it
with ``ALTER TABLE``, then bump nothing else.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, MetaData, Table, inspect, text

from db.models import (
    MACHINE_COLUMNS,
    UNKNOWN_LAUNCHER,
    Base,
    Baseline,
    Experiment,
    LongExperiment,
    Run,
    RunAudit,
    RunNote,
    RunRequests,
    ServiceRecord,
    WorkerRecord,
)


def _create_schema(connection: Connection) -> None:
    Base.metadata.create_all(connection)


def _table(model: type[Base]) -> Table:
    """A model's table (SQLAlchemy types ``__table__`` as a FromClause, which cannot be created)."""
    return Base.metadata.tables[model.__tablename__]


def _has_column(connection: Connection, table_name: str, column_name: str) -> bool:
    return column_name in {column["name"] for column in inspect(connection).get_columns(table_name)}


def _add_column(connection: Connection, table_name: str, column_name: str) -> None:
    """``ALTER TABLE ... ADD COLUMN`` for a model column, in the connected dialect's type."""
    if _has_column(connection, table_name, column_name):
        return
    column = Base.metadata.tables[table_name].c[column_name]
    column_type = column.type.compile(dialect=connection.dialect)
    connection.execute(text(f"ALTER TABLE {table_name} ADD COLUMN {column_name} {column_type}"))
    for index in column.table.indexes:
        if [c.name for c in index.columns] == [column_name]:
            index.create(connection, checkfirst=True)


def _workers(connection: Connection) -> None:
    """Scale-out: workers with identity, run placement, services per worker (the claim log this
    step once created is gone: see ``_no_claims_log``)."""
    for column_name in ("requires_labels", "pinned_worker", "worker_name", "worker_hardware"):
        _add_column(connection, Run.__tablename__, column_name)
    _table(WorkerRecord).create(connection, checkfirst=True)
    if not _has_column(connection, "services", "worker"):
        # The primary key becomes (worker, name): rebuild the small table, keeping its rows.
        # They were started by the single worker of before, whose default name is the host's.
        old = Table("services", MetaData(), autoload_with=connection)  # reflected: typed values
        rows = [dict(row) for row in connection.execute(old.select()).mappings()]
        connection.execute(text("DROP TABLE services"))
        _table(ServiceRecord).create(connection)
        if rows:
            host = socket.gethostname()
            connection.execute(_table(ServiceRecord).insert(), [{**row, "worker": host} for row in rows])


def _experiment_wall_time_ratio(connection: Connection) -> None:
    """Lab overhead: each experiment's wall time over its measured seconds."""
    _add_column(connection, "experiments", "wall_time_ratio")


STREAMING_COLUMNS = (
    "ttft_avg_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "tpot_avg_s",
    "tpot_p95_s",
    "ttft_hit_avg_s",
    "ttft_hit_p95_s",
    "ttft_miss_avg_s",
    "ttft_miss_p95_s",
    "tpot_hit_avg_s",
    "tpot_miss_avg_s",
    "unstreamed_answers",
)


def _client_streaming_latency(connection: Connection) -> None:
    """Client-side TTFT/TPOT of streamed runs, split by response-cache HIT/MISS."""
    for column_name in STREAMING_COLUMNS:
        _add_column(connection, Run.__tablename__, column_name)


def _capacity(connection: Connection) -> None:
    """Capacity and SLOs: per-request figures, goodput and attainment, a search's state."""
    for column_name in ("goodput_req_per_s", "slo_attainment", "slo_evaluated"):
        _add_column(connection, Run.__tablename__, column_name)
    _add_column(connection, Experiment.__tablename__, "capacity")
    _table(RunRequests).create(connection, checkfirst=True)


def _measurement(connection: Connection) -> None:
    """Trustworthy measurement: contention and steady-state columns; ``load_generator_warning``
    becomes ``measurement_warnings`` (its text copied over, then the old column dropped)."""
    for column_name in (
        "other_cpu_percent_avg",
        "steal_cpu_percent_avg",
        "steady_output_tok_per_s",
        "steady_req_per_s",
        "steady_source",
        "measurement_warnings",
    ):
        _add_column(connection, Run.__tablename__, column_name)
    if _has_column(connection, Run.__tablename__, "load_generator_warning"):
        connection.execute(
            text(
                "UPDATE runs SET measurement_warnings = load_generator_warning WHERE load_generator_warning IS NOT NULL"
            )
        )
        connection.execute(text("ALTER TABLE runs DROP COLUMN load_generator_warning"))


def _reproducibility(connection: Connection) -> None:
    """Conclusions that survive a second run: each run's machine-speed calibration, and the
    verdict rules an experiment's report is judged by, frozen when it was queued."""
    for column_name in ("machine_calibration_before_s", "machine_calibration_after_s"):
        _add_column(connection, Run.__tablename__, column_name)
    _add_column(connection, Experiment.__tablename__, "frozen_rules")


def _baselines(connection: Connection) -> None:
    """Baselines and regression gates: one baseline per run configuration, in a table of its own."""
    _table(Baseline).create(connection, checkfirst=True)


def _members(connection: Connection) -> None:
    """Lab members: who launched each run and experiment ("unknown" for the ones before),
    an audit table of run actions and a notes thread per run (the old single note stays)."""
    for table_name in (Run.__tablename__, Experiment.__tablename__):
        if _has_column(connection, table_name, "launched_by"):
            continue
        # As the models create it: NOT NULL with a default, so rows written by an older lab
        # process on the same database (which names no launcher) read "unknown" too.
        connection.execute(
            text(f"ALTER TABLE {table_name} ADD COLUMN launched_by VARCHAR(200) DEFAULT '{UNKNOWN_LAUNCHER}' NOT NULL")
        )
        for index in Base.metadata.tables[table_name].indexes:
            if [column.name for column in index.columns] == ["launched_by"]:
                index.create(connection, checkfirst=True)
    _table(RunAudit).create(connection, checkfirst=True)
    _table(RunNote).create(connection, checkfirst=True)


def _foreign_figures(connection: Connection) -> None:
    """Figures from outside the lab (another tool's, a trace's), by source, in a JSON column of their own."""
    _add_column(connection, Run.__tablename__, "foreign_figures")


TRACE_COLUMNS = (
    "trace_name",
    "trace_sha256",
    "lateness_p50_ms",
    "lateness_p99_ms",
    "lateness_max_ms",
    "requests_late_over_50ms",
    "trace_response_cache_ceiling",
    "trace_prefix_reuse_ceiling",
    "trace_requests_clipped",
    "trace_requests_skipped",
    "trace_requests_cut",
    "trace_cut_at_s",
)


def _trace_replay(connection: Connection) -> None:
    """Trace replay: the trace's identity, each run's lateness against the trace's schedule,
    the trace's cache ceilings and what of it was clipped, skipped or cut."""
    for column_name in TRACE_COLUMNS:
        _add_column(connection, Run.__tablename__, column_name)


def _machine_record(connection: Connection) -> None:
    """The hardware a run's backend chose its settings by (CPU, instruction sets, a fixed-kernel
    speed) and what "best" became; runs from before stay None ("not recorded")."""
    for column_name in MACHINE_COLUMNS:
        _add_column(connection, Run.__tablename__, column_name)


def _imports(connection: Connection) -> None:
    """Runs imported from other tools' result files: their source tool and the file's key."""
    for column_name in ("source_tool", "import_key"):
        _add_column(connection, Run.__tablename__, column_name)


def _long_experiments(connection: Connection) -> None:
    """Long experiments: stored plans the worker drives, and each experiment's link to its plan."""
    _table(LongExperiment).create(connection, checkfirst=True)
    _add_column(connection, Experiment.__tablename__, "long_experiment_id")


def _procrastinate_schema(connection: Connection) -> None:
    """PostgreSQL only: procrastinate's own schema (its jobs, workers and events tables and
    functions, of the pinned version), the shared queue's dispatch (lab.queue.dispatch). One
    migration history: the lab applies it, never ``procrastinate schema --apply``."""
    if connection.dialect.name != "postgresql" or inspect(connection).has_table("procrastinate_jobs"):
        return
    from procrastinate.schema import SchemaManager

    # Through the driver without parameters: the schema's SQL holds literal '%' signs.
    driver_connection = connection.connection.dbapi_connection
    driver_connection.execute(SchemaManager.get_schema())  # type: ignore[union-attr]  # open: never None


def _dispatch(connection: Connection) -> None:
    """The dispatch: a run's priority, its procrastinate job (PostgreSQL) and its fencing token,
    then procrastinate's schema on PostgreSQL; runs from before get priority and token 0."""
    for column_name in ("priority", "job_id", "fencing_token"):
        _add_column(connection, Run.__tablename__, column_name)
    connection.execute(text("UPDATE runs SET priority = 0, fencing_token = 0"))
    _procrastinate_schema(connection)


SEMANTIC_CACHE_COLUMNS = (
    "response_cache_exact_hit_rate",
    "semantic_cache_hit_rate",
    "semantic_cache_verified_hits",
    "semantic_cache_false_hit_rate",
    "semantic_cache_false_hit_rate_ci95_low",
    "semantic_cache_false_hit_rate_ci95_high",
    "semantic_cache_answer_mismatch_rate",
    "semantic_cache_added_hit_p50_ms",
    "semantic_cache_added_hit_p99_ms",
    "semantic_cache_added_miss_p50_ms",
    "semantic_cache_added_miss_p99_ms",
)


def _semantic_cache(connection: Connection) -> None:
    """The response cache's semantic tier: each tier's hit rate, the false hits and the latency
    the tier added (db.figures, group "The semantic cache"); runs from before stay None."""
    for column_name in SEMANTIC_CACHE_COLUMNS:
        _add_column(connection, Run.__tablename__, column_name)


def _trace_semantic_ceiling(connection: Connection) -> None:
    """A trace run with the semantic tier: the trace's semantic cache ceiling at the run's
    threshold (db.figures ``trace_semantic_cache_ceiling``); runs from before stay None."""
    _add_column(connection, Run.__tablename__, "trace_semantic_cache_ceiling")


def _no_claims_log(connection: Connection) -> None:
    """The shared queue's claims log (``run_claims``) goes: procrastinate's jobs record who took
    a run, and the run its worker and fencing token; nothing has written the table since."""
    connection.execute(text("DROP TABLE IF EXISTS run_claims"))


MIGRATIONS: list[Callable[[Connection], None]] = [
    _create_schema,  # 0 -> 1
    _workers,  # 1 -> 2
    _experiment_wall_time_ratio,  # 2 -> 3
    _client_streaming_latency,  # 3 -> 4
    _capacity,  # 4 -> 5
    _measurement,  # 5 -> 6
    _reproducibility,  # 6 -> 7
    _baselines,  # 7 -> 8
    _members,  # 8 -> 9
    _foreign_figures,  # 9 -> 10
    _trace_replay,  # 10 -> 11
    _machine_record,  # 11 -> 12
    _imports,  # 12 -> 13
    _long_experiments,  # 13 -> 14
    _dispatch,  # 14 -> 15
    _semantic_cache,  # 15 -> 16
    _no_claims_log,  # 16 -> 17
    _trace_semantic_ceiling,  # 17 -> 18
]

LATEST_VERSION = len(MIGRATIONS)


def current_version(connection: Connection) -> int:
    """The schema version of the connected database (0 for an empty one)."""
    if not inspect(connection).has_table("schema_version"):
        return 0
    row = connection.execute(text("SELECT version FROM schema_version WHERE id = 1")).first()
    return int(row[0]) if row else 0


# The PostgreSQL advisory lock every lab process takes to create or upgrade the schema
# (any constant the lab alone uses: "lab schema" in ASCII).
SCHEMA_LOCK_KEY = 0x6C6162736368656D


@contextmanager
def _schema_lock(engine: Engine) -> Iterator[Connection]:
    """One transaction holding the database's schema lock: one process at a time creates or
    upgrades the schema; the others wait, then find it ready.

    PostgreSQL: a transaction-level advisory lock on the same connection (DDL is
    transactional there). SQLite: ``BEGIN IMMEDIATE``, the database's write lock, taken
    before the first read so the version read and the DDL are one transaction (Python's
    sqlite3 otherwise runs DDL outside any transaction); others wait for it (busy timeout).
    """
    with engine.connect() as connection:
        dialect = connection.dialect.name
        if dialect == "sqlite":
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        elif dialect == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
        try:
            yield connection
        except BaseException:
            connection.rollback()
            raise
        connection.commit()


def _is_latest(engine: Engine) -> bool:
    """True when the schema is already at ``LATEST_VERSION`` (read without taking the lock,
    so a read-only database that needs nothing opens)."""
    with engine.connect() as connection:
        return current_version(connection) == LATEST_VERSION


def upgrade(engine: Engine) -> int:
    """Bring the database to ``LATEST_VERSION`` under the schema lock; returns the version it
    started at (read under the lock: a process that waited for another's upgrade finds it done)."""
    if _is_latest(engine):
        return LATEST_VERSION
    with _schema_lock(engine) as connection:
        start = current_version(connection)
        if start == 0:
            _create_schema(connection)  # every column of the models: no migration to replay
            _procrastinate_schema(connection)
            connection.execute(text("INSERT INTO schema_version (id, version) VALUES (1, :v)"), {"v": LATEST_VERSION})
        elif start < LATEST_VERSION:
            for version in range(start, LATEST_VERSION):
                MIGRATIONS[version](connection)
            connection.execute(text("UPDATE schema_version SET version = :v WHERE id = 1"), {"v": LATEST_VERSION})
    return start
