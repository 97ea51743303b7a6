"""ORM models: experiments, runs (the queue is the runs table), per-run series, services."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utc_now() -> datetime:
    return datetime.now(UTC)


# Who launched a run recorded before launchers were (and what a missing name is stored as).
UNKNOWN_LAUNCHER = "unknown"


class Base(DeclarativeBase):
    pass


class RunStatus:
    """The states a run goes through, in order; the last four are final."""

    QUEUED = "queued"
    STARTING = "starting"
    WARMING = "warming"
    RUNNING = "running"
    PARSING = "parsing"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    ACTIVE = (STARTING, WARMING, RUNNING, PARSING)
    FINAL = (DONE, FAILED, CANCELLED, INTERRUPTED)
    ALL = (QUEUED, STARTING, WARMING, RUNNING, PARSING, DONE, FAILED, CANCELLED, INTERRUPTED)


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


class LongExperimentState:
    """Where a long experiment stands; the last two are final."""

    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    STOPPED = "stopped"

    FINAL = (FINISHED, STOPPED)


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


class RunResultColumns:
    """A run's results: one nullable column each, units in the names; None means not measured.

    This is THE list of a run's figures: ``lab.measurement.results.RunResults`` (what the parser and the
    metrics code fill), the CSV export and the Compare records derive from it. A new figure
    is one line here and a migration that adds its column (db/migrations.py), nothing else.
    """

    # Figures (client side, from k6). Latencies are over successful requests only.
    requests_ok: Mapped[int | None] = mapped_column(Integer)
    requests_failed: Mapped[int | None] = mapped_column(Integer)
    req_per_s: Mapped[float | None] = mapped_column(Float)
    output_tok_per_s: Mapped[float | None] = mapped_column(Float)
    input_tok_per_s: Mapped[float | None] = mapped_column(Float)
    latency_avg_s: Mapped[float | None] = mapped_column(Float)
    latency_p50_s: Mapped[float | None] = mapped_column(Float)
    latency_p90_s: Mapped[float | None] = mapped_column(Float)
    latency_p95_s: Mapped[float | None] = mapped_column(Float)
    latency_p99_s: Mapped[float | None] = mapped_column(Float)
    latency_max_s: Mapped[float | None] = mapped_column(Float)
    iterations_completed: Mapped[int | None] = mapped_column(Integer)
    iterations_interrupted: Mapped[int | None] = mapped_column(Integer)
    iterations_dropped: Mapped[int | None] = mapped_column(Integer)
    measured_duration_s: Mapped[float | None] = mapped_column(Float)
    # Client-side streaming latency (streamed runs only, from k6/lib.js's lab_ttft/lab_tpot):
    # TTFT is the time to first byte, sent with the first token's chunk; TPOT per request is
    # (duration - TTFT) / (tokens - 1). *_hit/*_miss: split by the response cache's X-Cache.
    ttft_avg_s: Mapped[float | None] = mapped_column(Float)
    ttft_p50_s: Mapped[float | None] = mapped_column(Float)
    ttft_p95_s: Mapped[float | None] = mapped_column(Float)
    ttft_p99_s: Mapped[float | None] = mapped_column(Float)
    tpot_avg_s: Mapped[float | None] = mapped_column(Float)
    tpot_p95_s: Mapped[float | None] = mapped_column(Float)
    ttft_hit_avg_s: Mapped[float | None] = mapped_column(Float)
    ttft_hit_p95_s: Mapped[float | None] = mapped_column(Float)
    ttft_miss_avg_s: Mapped[float | None] = mapped_column(Float)
    ttft_miss_p95_s: Mapped[float | None] = mapped_column(Float)
    tpot_hit_avg_s: Mapped[float | None] = mapped_column(Float)
    tpot_miss_avg_s: Mapped[float | None] = mapped_column(Float)
    # Answers that came back as one body although a stream was asked for (their TTFT is
    # the time to the whole body): a run with any is not a streamed measurement.
    unstreamed_answers: Mapped[int | None] = mapped_column(Integer)
    # Figures (server side, from /metrics deltas).
    prefix_cache_hit_rate: Mapped[float | None] = mapped_column(Float)
    response_cache_hit_rate: Mapped[float | None] = mapped_column(Float)
    response_cache_hits: Mapped[int | None] = mapped_column(Integer)
    response_cache_store_errors: Mapped[int | None] = mapped_column(Integer)
    server_ttft_avg_s: Mapped[float | None] = mapped_column(Float)
    server_time_per_output_token_avg_s: Mapped[float | None] = mapped_column(Float)
    # Resource use while the load ran.
    k6_cpu_percent_avg: Mapped[float | None] = mapped_column(Float)
    backend_cpu_percent_avg: Mapped[float | None] = mapped_column(Float)
    backend_rss_max_mb: Mapped[float | None] = mapped_column(Float)
    gpu_utilization_avg_percent: Mapped[float | None] = mapped_column(Float)
    # Against an SLO (set when a run is evaluated, e.g. as a capacity probe): requests per second
    # that met every per-request limit, their share of all requests, and the SLO used.
    goodput_req_per_s: Mapped[float | None] = mapped_column(Float)
    slo_attainment: Mapped[float | None] = mapped_column(Float)
    slo_evaluated: Mapped[str | None] = mapped_column(Text)
    # Host contention: CPU used by processes that are not the run's (% of one core), and steal.
    other_cpu_percent_avg: Mapped[float | None] = mapped_column(Float)
    steal_cpu_percent_avg: Mapped[float | None] = mapped_column(Float)
    # Steady state: inside the load window only (no warm-up, no drain); the source says
    # whose counters they come from ("server counters" or "client series").
    steady_output_tok_per_s: Mapped[float | None] = mapped_column(Float)
    steady_req_per_s: Mapped[float | None] = mapped_column(Float)
    steady_source: Mapped[str | None] = mapped_column(String(50))
    # The machine's speed around the run: seconds a fixed CPU kernel took just before and just
    # after the load (lab/measurement/machine_speed.py); over an experiment they give each run
    # a machine-speed index (1.0 = the median run).
    machine_calibration_before_s: Mapped[float | None] = mapped_column(Float)
    machine_calibration_after_s: Mapped[float | None] = mapped_column(Float)
    # Every reason to read the figures with care (k6 CPU, dropped iterations, contention,
    # count-check mismatch, a run too short for its latency...), "; "-separated.
    measurement_warnings: Mapped[str | None] = mapped_column(Text)
    # A trace replay (workload "trace"): the trace's identity, how late each request left
    # against its time in the trace (send time less schedule), the hit rates the trace itself
    # allows an unbounded exact response cache and an unbounded prefix cache, and what of the
    # trace was not sent as it is (clipped or skipped for the context, cut at the duration).
    trace_name: Mapped[str | None] = mapped_column(String(200))
    trace_sha256: Mapped[str | None] = mapped_column(String(64))
    lateness_p50_ms: Mapped[float | None] = mapped_column(Float)
    lateness_p99_ms: Mapped[float | None] = mapped_column(Float)
    lateness_max_ms: Mapped[float | None] = mapped_column(Float)
    requests_late_over_50ms: Mapped[int | None] = mapped_column(Integer)
    trace_response_cache_ceiling: Mapped[float | None] = mapped_column(Float)
    trace_prefix_reuse_ceiling: Mapped[float | None] = mapped_column(Float)
    trace_requests_clipped: Mapped[int | None] = mapped_column(Integer)
    trace_requests_skipped: Mapped[int | None] = mapped_column(Integer)
    trace_requests_cut: Mapped[int | None] = mapped_column(Integer)
    trace_cut_at_s: Mapped[float | None] = mapped_column(Float)


class Run(RunResultColumns, Base):
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
RESULT_COLUMNS: tuple[str, ...] = tuple(RunResultColumns.__annotations__)
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


class RunClaim(Base):
    """One line per claim of a run by a worker: the audit trail of the shared queue."""

    __tablename__ = "run_claims"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(Integer, index=True)
    worker_name: Mapped[str] = mapped_column(String(100))
    claimed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)


class Baseline(Base):
    """The baseline of one run configuration (the run spec without its seed; the lab computes
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
