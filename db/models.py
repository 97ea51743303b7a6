"""ORM models: experiments, runs (the queue is the runs table), per-run series, services."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum, nonmember
from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from db.figures import FIGURE_NAMES, FIGURES


def utc_now() -> datetime:
    return datetime.now(UTC)


# Who launched a run recorded before launchers were (and what a missing name is stored as).
UNKNOWN_LAUNCHER = "unknown"


class Base(DeclarativeBase):
    pass


class RunStatus(StrEnum):
    """The states a run goes through, in order; the last four are final. The value is what the
    store keeps; the words a page shows for a state are the page's (``pages.view.tables``)."""

    QUEUED = "queued"
    STARTING = "starting"
    WARMING = "warming"
    RUNNING = "running"
    PARSING = "parsing"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    ACTIVE = nonmember((STARTING, WARMING, RUNNING, PARSING))
    FINAL = nonmember((DONE, FAILED, CANCELLED, INTERRUPTED))
    ALL = nonmember((QUEUED, STARTING, WARMING, RUNNING, PARSING, DONE, FAILED, CANCELLED, INTERRUPTED))


class Experiment(Base):
    """A named grid of runs, as launched from a form, a preset or the CLI."""

    __tablename__ = "experiments"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    preset: Mapped[str | None] = mapped_column(String(100), index=True)
    scale: Mapped[str] = mapped_column(String(20), default="full")
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now, index=True)
    # (first run started -> last run finished) / sum of the runs' measured seconds: the lab's overhead.
    wall_time_ratio: Mapped[float | None] = mapped_column(Float)
    # A capacity search's plan, live state and result per backend (None for a grid experiment).
    capacity: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The verdict rules (and their version) in force when the experiment was queued: its report
    # judges with these, whatever the code says later (a reproduction's rules are fixed before its data).
    frozen_rules: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Who queued it: the signed-in member, the name given in the web lab or the OS user of the CLI.
    launched_by: Mapped[str] = mapped_column(
        String(200), default=UNKNOWN_LAUNCHER, server_default=UNKNOWN_LAUNCHER, index=True
    )
    # The long experiment (a stored plan the worker drives) this experiment is part of, if any.
    long_experiment_id: Mapped[int | None] = mapped_column(
        ForeignKey("long_experiments.id", ondelete="SET NULL"), index=True
    )
    runs: Mapped[list[Run]] = relationship(back_populates="experiment", order_by="Run.id")


class LongExperimentState(StrEnum):
    """Where a long experiment stands; the last two are final."""

    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    STOPPED = "stopped"

    FINAL = nonmember((FINISHED, STOPPED))


class LongExperiment(Base):
    """A stored plan that the worker drives round by round (lab.queue.long_experiments): its
    experiments, how long each cell runs and why, the rules and budget, the commit it was
    created on and the machine its first run ran on. Survives any stop of the lab."""

    __tablename__ = "long_experiments"

    id: Mapped[int] = mapped_column(primary_key=True)
    # "reproduction" (the seed's presets, judged by the report's claims) or "grid" (one experiment,
    # judged by its grid comparisons).
    kind: Mapped[str] = mapped_column(String(30))
    name: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(20), default=LongExperimentState.RUNNING, index=True)
    state_reason: Mapped[str | None] = mapped_column(Text)
    # The plan as fixed at creation: cells and their lengths with reasons, scale, planned rounds,
    # rules version, order seeds, budget, precision and round limit, where the report goes.
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    lab_commit: Mapped[str | None] = mapped_column(String(100))
    lab_dirty: Mapped[bool] = mapped_column(Boolean, default=False)
    allow_commit_change: Mapped[bool] = mapped_column(Boolean, default=False)
    # The machine record of the worker that took its first run (lab.measurement.hardware.machine_identity).
    machine: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    machine_worker: Mapped[str | None] = mapped_column(String(100))
    # Each backend's resolved settings at its first run: later runs must resolve the same.
    backend_settings: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Workers that take no more of it (their backend resolved other settings), with why.
    refused_workers: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Bumped by every change the driver makes: two workers never queue the same round twice.
    step: Mapped[int] = mapped_column(Integer, default=0)
    launched_by: Mapped[str] = mapped_column(String(200), default=UNKNOWN_LAUNCHER)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now, index=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


def _result_columns() -> Any:
    """The mixin of a run's result columns, one nullable column a figure of ``db.figures.RunFigures``
    (where each figure is declared once), in its order; text sized by the figure's ``max_length``."""
    sql_types: dict[type, Any] = {int: Integer, float: Float}
    namespace: dict[str, Any] = {"__annotations__": {}, "__doc__": "A run's results: one nullable column a figure."}
    for item in FIGURES:
        if item.python_type is str:
            sql_type = String(item.max_length) if item.max_length else Text
        else:
            sql_type = sql_types[item.python_type]
        namespace[item.name] = mapped_column(sql_type)
        namespace["__annotations__"][item.name] = Mapped[item.python_type | None]  # type: ignore[name-defined]  # a type known at run time only
    return type("RunResultColumns", (), namespace)


# A run's result columns (derived: a new figure is its declaration in db/figures.py and a migration).
RunResultColumns: Any = _result_columns()


class Run(RunResultColumns, Base):  # type: ignore[misc]  # the result columns are built from db/figures.py at import
    """One cell of an experiment, one repeat: queued, executed by the worker, then figures."""

    __tablename__ = "runs"
    # What defines a run (its spec, the columns taken from it, its place in the grid):
    # a repeat of the run copies exactly these.
    SPEC_COLUMNS: ClassVar[tuple[str, ...]] = (
        "cell_label",
        "repeat_index",
        "spec",
        "backend",
        "model",
        "workload",
        "load_kind",
        "vus",
        "arrival_rate_per_s",
        "prompts",
        "duration_s",
        "max_tokens",
        "random_seed",
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[int | None] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    cell_label: Mapped[str] = mapped_column(String(200), default="")
    repeat_index: Mapped[int] = mapped_column(Integer, default=0)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Denormalised spec fields for filtering and comparing without parsing JSON.
    backend: Mapped[str] = mapped_column(String(50), index=True)
    model: Mapped[str] = mapped_column(String(500))
    workload: Mapped[str] = mapped_column(String(50))
    load_kind: Mapped[str] = mapped_column(String(50))
    vus: Mapped[int | None] = mapped_column(Integer)
    arrival_rate_per_s: Mapped[float | None] = mapped_column(Float)
    prompts: Mapped[int | None] = mapped_column(Integer)
    duration_s: Mapped[float] = mapped_column(Float)
    max_tokens: Mapped[int] = mapped_column(Integer)
    random_seed: Mapped[int] = mapped_column(Integer)
    tags: Mapped[str] = mapped_column(String(500), default="")
    # The single note of before the notes thread (RunNote); shown as the thread's first entry.
    notes: Mapped[str] = mapped_column(Text, default="")
    # Who queued it (see Experiment.launched_by); "unknown" for runs from before it was recorded.
    launched_by: Mapped[str] = mapped_column(
        String(200), default=UNKNOWN_LAUNCHER, server_default=UNKNOWN_LAUNCHER, index=True
    )

    # A run imported from another tool's result file: the tool and version ("guidellm 0.8.1"),
    # None for the lab's own runs; and "sha256 of the file:benchmark index", so importing the
    # same file again adds nothing (unique).
    source_tool: Mapped[str | None] = mapped_column(String(100), index=True)
    import_key: Mapped[str | None] = mapped_column(String(100), index=True, unique=True)

    status: Mapped[str] = mapped_column(String(20), default=RunStatus.QUEUED, index=True)
    status_reason: Mapped[str | None] = mapped_column(Text)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    worker_pid: Mapped[int | None] = mapped_column(Integer)
    # Where it may run (from the spec) and where it ran (set when a worker claims it).
    requires_labels: Mapped[list[str] | None] = mapped_column(JSON)
    pinned_worker: Mapped[str | None] = mapped_column(String(100))
    worker_name: Mapped[str | None] = mapped_column(String(100), index=True)
    worker_hardware: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The dispatch (lab.queue.dispatch): higher runs first, then the oldest; on PostgreSQL the
    # procrastinate job that carries it. ``fencing_token`` goes up at each claim and when the run
    # is taken from a lost worker: a write of the run's outcome carries the token it claimed with.
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    job_id: Mapped[int | None] = mapped_column(BigInteger, index=True)
    fencing_token: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now, index=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    load_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Live progress, updated about once a second while k6 runs.
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    # Client/server cross-check: {"requests": {...}, "output_tokens": {...}}.
    count_check: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Figures from outside the lab (another tool's result, a trace's own statistics), by source:
    # {source: {name: value}}; not the lab's figures, so not result columns (RunResults.foreign).
    foreign_figures: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    server_metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    environment: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The hardware the backend chose its settings by, and what "best" became (one column each:
    # lab.measurement.machine_record.MachineRecord); None for runs from before they were recorded.
    cpu_model_name: Mapped[str | None] = mapped_column(String(200))
    cpu_family: Mapped[str | None] = mapped_column(String(100))
    cpu_avx2: Mapped[bool | None] = mapped_column(Boolean)
    cpu_avx512: Mapped[bool | None] = mapped_column(Boolean)
    cpu_avx512_bf16: Mapped[bool | None] = mapped_column(Boolean)
    cpu_amx: Mapped[bool | None] = mapped_column(Boolean)
    reference_kernel_gflops: Mapped[float | None] = mapped_column(Float)
    backend_settings: Mapped[str | None] = mapped_column(Text)

    experiment: Mapped[Experiment | None] = relationship(back_populates="runs")
    series: Mapped[RunSeries | None] = relationship(back_populates="run", cascade="all, delete-orphan", uselist=False)


# The result columns, in declaration order.
RESULT_COLUMNS: tuple[str, ...] = FIGURE_NAMES
# The machine record's columns (lab.measurement.machine_record.MachineRecord), in its order.
MACHINE_COLUMNS: tuple[str, ...] = (
    "cpu_model_name",
    "cpu_family",
    "cpu_avx2",
    "cpu_avx512",
    "cpu_avx512_bf16",
    "cpu_amx",
    "reference_kernel_gflops",
    "backend_settings",
)


class RunSeries(Base):
    """Per-second series of one run, kept as one JSON document (columns of equal length)."""

    __tablename__ = "run_series"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    series: Mapped[dict[str, Any]] = mapped_column(JSON)
    service_log_tails: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    run: Mapped[Run] = relationship(back_populates="series")


class RunRequests(Base):
    """Per-request figures of one run, kept compactly so any SLO can be evaluated later.

    Each figure is a zlib-compressed little-endian float32 array (seconds; NaN where a
    request has no such figure), aligned by request; ``ok`` is one byte per request.
    """

    __tablename__ = "run_requests"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    requests: Mapped[int] = mapped_column(Integer)
    encoding: Mapped[str] = mapped_column(String(50))
    latency_s: Mapped[bytes] = mapped_column(LargeBinary)
    ok: Mapped[bytes] = mapped_column(LargeBinary)
    ttft_s: Mapped[bytes | None] = mapped_column(LargeBinary)
    tpot_s: Mapped[bytes | None] = mapped_column(LargeBinary)


class WorkerRecord(Base):
    """A queue worker: who it is, what it has, and when it last said it was alive."""

    __tablename__ = "workers"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int | None] = mapped_column(Integer)
    labels: Mapped[list[str]] = mapped_column(JSON, default=list)
    # CPU model, cores, memory, GPUs (name, memory), lab version: see lab/measurement/hardware.py.
    hardware: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(20), default="running")  # running | stopped
    current_run_id: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)


class Baseline(Base):
    """The baseline of one run configuration (the run spec without its random seed; the lab computes
    the key): the done runs later runs of that configuration are compared against. One per
    configuration; marking another replaces it. What was marked, a run or an experiment, is
    kept beside the runs it stood for then."""

    __tablename__ = "baselines"

    configuration_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    configuration: Mapped[dict[str, Any]] = mapped_column(JSON)
    experiment_id: Mapped[int | None] = mapped_column(Integer)
    run_id: Mapped[int | None] = mapped_column(Integer)
    run_ids: Mapped[list[int]] = mapped_column(JSON)
    marked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)


class ServiceRecord(Base):
    """A managed service process a worker started on its own machine; kept so a restarted
    worker can stop stale ones. Names are unique per worker, not across the lab."""

    __tablename__ = "services"

    worker: Mapped[str] = mapped_column(String(100), primary_key=True, default="")
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    kind: Mapped[str] = mapped_column(String(50))
    state: Mapped[str] = mapped_column(String(20), default="stopped")
    pid: Mapped[int | None] = mapped_column(Integer)
    port: Mapped[int | None] = mapped_column(Integer)
    url: Mapped[str | None] = mapped_column(String(300))
    config_hash: Mapped[str | None] = mapped_column(String(64))
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    log_path: Mapped[str | None] = mapped_column(String(500))
    # The lab process that owns it (None: started from the CLI, detached on purpose).
    owner_pid: Mapped[int | None] = mapped_column(Integer)
    # psutil create_time of pid: tells our process apart from a later one reusing the pid.
    process_created_at_epoch_s: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    message: Mapped[str | None] = mapped_column(Text)


class RunAudit(Base):
    """Who did what to a run, and when: cancel, delete, tag, note, run again.

    No foreign key: the line outlives a deleted run (a delete is itself audited)."""

    __tablename__ = "run_audit"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(Integer, index=True)
    action: Mapped[str] = mapped_column(String(30))
    actor: Mapped[str] = mapped_column(String(200))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    detail: Mapped[str | None] = mapped_column(Text)


class RunNote(Base):
    """One note in a run's thread: author, time, text (shown as plain text)."""

    __tablename__ = "run_notes"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    author: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    text: Mapped[str] = mapped_column(Text)


class SchemaVersion(Base):
    """One row: the schema version this database is at (see db/migrations.py)."""

    __tablename__ = "schema_version"

    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
