"""The runner: executes queued runs one at a time, reporting every step to the database.

``Worker.run_forever`` claims the oldest queued run, and ``RunExecutor`` takes it through
starting (services up) -> warming -> running (k6) -> parsing -> done | failed | cancelled.
Nothing here imports Streamlit: pages only read what is written to the database.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from pydantic import ValidationError
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus
from lab import datasets, environment, k6_results, server_metrics
from lab.k6_driver import K6Process, describe_exit_code, k6_binary, script_path
from lab.resources import ResourceSampler, summarise
from lab.settings import Settings
from lab.specs import RunSpec, format_validation_error
from services.catalog import (
    INFERENCE_KINDS,
    cache_proxy_config,
    naive_config,
    redis_config,
    vllm_config,
)
from services.manager import ServiceManager
from services.supervisor import ServiceStartAborted, stop_process_tree

log = logging.getLogger("lab.runner")

NUMBER_STORY_PROMPT = "Write a short story about the number {n}."
# k6 using more than this share of a core on average may have limited the load it applied.
K6_CPU_WARNING_PERCENT = 80.0
# Services a run survives losing: the cache proxy fails open without Redis (answers come
# from the backend, store errors are counted), so the run goes on and says so.
FAIL_OPEN_SERVICES = ("redis",)


# errno values that mean "the data could not be written": disk full, quota, read-only, I/O.
WRITE_FAILURE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM, errno.EFBIG})
# Less free space than this where the run folder lives: k6's outputs were likely cut short.
RUN_FOLDER_MIN_FREE_BYTES = 1024 * 1024
# How often, and after how long, the final state of a run is written again when it fails.
FINAL_WRITE_RETRY_DELAYS_S = (0.5, 2.0, 5.0)


def write_failure_message(error: BaseException) -> str | None:
    """One line for a failed write (disk full, read-only, I/O error, a database error);
    None when ``error`` is something else."""
    if isinstance(error, SQLAlchemyError):
        detail = str(getattr(error, "orig", None) or error).splitlines()[0]
        return f"the database could not be written ({detail})"
    if isinstance(error, OSError) and error.errno in WRITE_FAILURE_ERRNOS:
        where = f": {error.filename}" if error.filename else ""
        return f"could not write the run's data ({error.strerror or os.strerror(error.errno)}{where})"
    return None


# Final states no database write could record (the database itself failing): the worker
# writes them before it claims another run, so a run is never left active for good.
_unsaved_final_states: dict[int, dict[str, Any]] = {}


def _is_out_of_space(problem: str) -> bool:
    return "No space left" in problem or "disk is full" in problem or "Disk quota" in problem


def save_pending_final_states(engine: Engine) -> list[int]:
    """Write the final states that could not be written earlier; returns the run ids written."""
    written = []
    for run_id, values in list(_unsaved_final_states.items()):
        try:
            store.set_run_status(engine=engine, run_id=run_id, **values)
        except SQLAlchemyError:
            continue
        del _unsaved_final_states[run_id]
        written.append(run_id)
    return written


def sqlite_file_identity(database_url: str) -> tuple[int, int] | None:
    """(device, inode) of a SQLite database file, or None (not SQLite, or the file is gone)."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    try:
        stat = os.stat(url.database)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


class RunCancelled(Exception):
    """The user asked to cancel the run."""


class RunFailed(Exception):
    """The run cannot go on; the message says why, for the user."""


@dataclass
class RunTargets:
    """Where the load goes and which services back it."""

    target_url: str
    backend_url: str
    backend_service: str | None  # managed service name, None for external
    proxy_url: str | None = None
    service_names: list[str] = field(default_factory=list)


@lru_cache(maxsize=4)
def _conversations(path: str) -> tuple[datasets.Conversation, ...]:
    # Reading the 125 MB ShareGPT file takes ~1-2 s; keep it for the worker's lifetime.
    return tuple(datasets.iter_sharegpt_conversations(path))


def k6_version() -> str | None:
    import subprocess

    try:
        out = subprocess.run([k6_binary(), "version"], capture_output=True, text=True, timeout=10).stdout
        return out.strip().splitlines()[0] if out.strip() else None
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return None


def k6_environment(spec: RunSpec, *, target_url: str, requests_file: Path | None) -> dict[str, str]:
    """The ``-e`` settings for the k6 scripts (see k6/lib.js)."""
    load = spec.load
    env: dict[str, str] = {
        "TARGET": target_url,
        "MODEL": spec.served_model_name or spec.model,
        "MAX_TOKENS": str(spec.max_tokens),
        "SEED_BASE": str(spec.random_seed),
        "LOAD_KIND": load.kind,
        "GRACEFUL_STOP": f"{load.graceful_stop_s:g}s",
        "GRACEFUL_RAMP_DOWN": f"{load.graceful_stop_s:g}s",
        "REQUEST_TIMEOUT": "900s",
        "PROMPTS": str(spec.workload.prompts),
    }
    if spec.temperature is not None:
        env["TEMPERATURE"] = str(spec.temperature)
    if spec.top_p is not None:
        env["TOP_P"] = str(spec.top_p)
    if requests_file is not None:
        env["REQUESTS_FILE"] = str(requests_file)
    if load.kind == "constant-vus":
        env.update(VUS=str(load.vus), DURATION=f"{load.duration_s:g}s")
    elif load.kind == "ramping-vus":
        env["STAGES"] = json.dumps([{"duration": f"{s.duration_s:g}s", "target": s.target_vus} for s in load.stages])
    else:
        rate, time_unit = k6_rate(float(load.rate_per_s or 1.0))
        env.update(
            RATE=str(rate),
            TIME_UNIT=time_unit,
            DURATION=f"{load.duration_s:g}s",
            PRE_ALLOCATED_VUS=str(min(load.max_vus, 8)),
            MAX_VUS=str(load.max_vus),
        )
    return env


def k6_rate(rate_per_s: float) -> tuple[int, str]:
    """``rate_per_s`` as k6's whole iterations per time unit: per second, minute or hour,
    the first unit that makes it whole (0.5/s -> 30 per 1m); else rounded per hour."""
    for unit_s, unit in ((1, "1s"), (60, "1m"), (3600, "1h")):
        per_unit = rate_per_s * unit_s
        if abs(per_unit - round(per_unit)) < 1e-9 and round(per_unit) >= 1:
            return round(per_unit), unit
    return max(1, round(rate_per_s * 3600)), "1h"


def warmup_messages(spec: RunSpec, requests_file: Path | None) -> list[list[dict[str, str]]]:
    """The messages of the warm-up requests (the workload's own first requests)."""
    if requests_file is not None:
        sessions = json.loads(requests_file.read_text())
        turns = [turn["messages"] for session in sessions for turn in session]
    else:
        turns = [[{"role": "user", "content": NUMBER_STORY_PROMPT.format(n=n)}] for n in range(spec.workload.prompts)]
    return [turns[i % len(turns)] for i in range(spec.warmup_requests)] if turns else []


class RunExecutor:
    """Executes one claimed run."""

    def __init__(self, *, engine: Engine, settings: Settings, services: ServiceManager, run_id: int) -> None:
        self.engine = engine
        self.settings = settings
        self.services = services
        self.run_id = run_id
        self.run_dir = settings.runs_dir / str(run_id)
        self.k6: K6Process | None = None
        # The resolved configuration of each service this run used (e.g. vLLM's dtype "best" -> bfloat16).
        self.service_configs: dict[str, dict[str, Any]] = {}
        self.lost_services: list[str] = []  # fail-open services that died during the load
        self.cache_errors = 0  # answers the proxy served without Redis (X-Cache: ERROR)
        # Server-side gauges sampled once a second during the load (running, waiting requests).
        self.server_samples: list[dict[str, float | None]] = []
        # Why a service's /metrics could not be read (an external target may serve anything).
        self.metrics_problems: dict[str, str] = {}

    # -- small helpers -----------------------------------------------------------------
    def _status(self, status: str, **values: Any) -> None:
        store.set_run_status(engine=self.engine, run_id=self.run_id, status=status, **values)

    def _cancel_requested(self) -> bool:
        return store.is_cancel_requested(engine=self.engine, run_id=self.run_id)

    def _check_cancel(self) -> None:
        if self._cancel_requested():
            raise RunCancelled()

    # -- steps -------------------------------------------------------------------------
    def bring_up_services(self, spec: RunSpec) -> RunTargets:
        """Start (or reuse) what the spec needs; stop the inference backend it does not use."""
        base = spec.base_backend
        if base == "external":
            backend_url, backend_service = str(spec.target_url).rstrip("/"), None
        else:
            # One accelerator (or two CPU cores): by default never measure with another backend loaded.
            if self.settings.stop_idle_backends:
                for other in INFERENCE_KINDS:
                    if other != base:
                        self.services.stop(other)
            self._check_cancel()
            if base == "naive":
                config = naive_config(model=spec.model, dtype=spec.naive.dtype)
            else:
                options = spec.vllm
                config = vllm_config(
                    model=spec.model, dtype=options.dtype, enforce_eager=options.enforce_eager,
                    max_model_len=options.max_model_len, prefix_caching=options.prefix_caching,
                    kv_cache_gib=options.kv_cache_gib, gpu_memory_utilization=options.gpu_memory_utilization,
                    extra_args=options.extra_args,
                )
            backend_url, backend_service = self.services.ensure(base, config, abort=self._cancel_requested), base
            self.service_configs[base] = config.params
        targets = RunTargets(target_url=backend_url, backend_url=backend_url, backend_service=backend_service)
        if backend_service:
            targets.service_names.append(backend_service)
        if spec.uses_cache:
            self._check_cancel()
            redis_url = self.services.ensure("redis", redis_config(), abort=self._cancel_requested)
            proxy_url = self.services.ensure(
                "cache-proxy",
                cache_proxy_config(
                    upstream_url=backend_url, redis_url=redis_url, policy=spec.cache.policy, ttl_s=spec.cache.ttl_s,
                    single_flight=spec.cache.single_flight,
                ),
                abort=self._cancel_requested,
            )
            targets.target_url, targets.proxy_url = proxy_url, proxy_url
            targets.service_names += ["redis", "cache-proxy"]
            self.service_configs["cache-proxy"] = {"policy": spec.cache.policy, "ttl_s": spec.cache.ttl_s,
                                                   "single_flight": spec.cache.single_flight}
        return targets

    def prepare_workload(self, spec: RunSpec) -> Path | None:
        """Write the request file chat replay needs (None for number-story)."""
        workload = spec.workload
        if workload.kind == "number-story":
            return None
        path = self.run_dir / "requests.json"
        if workload.kind == "sharegpt-chat":
            source = workload.dataset_path or str(datasets.default_sharegpt_path())
            sessions = datasets.build_chat_sessions(
                _conversations(source), sessions=workload.sessions, max_turns=workload.max_turns,
                system_prompt=workload.system_prompt, seed=spec.random_seed,
                max_session_chars=workload.max_session_chars,
            )
        else:
            requests = datasets.load_custom_requests(str(workload.requests_path))
            sessions = datasets.custom_requests_as_sessions(requests)
        if not sessions:
            raise RunFailed("the workload has no usable sessions: check the dataset and the turn/size limits")
        return datasets.write_requests_file(sessions, path)

    def reset_caches(self, spec: RunSpec, targets: RunTargets) -> None:
        """Empty the response cache and vLLM's prefix cache so the run starts cold."""
        if spec.keep_caches_warm:
            return
        if targets.proxy_url:
            response = httpx.post(f"{targets.proxy_url}/cache/flush", timeout=30)
            if response.status_code >= 400:
                raise RunFailed(f"could not flush the response cache: HTTP {response.status_code}")
        if targets.backend_service == "vllm":
            try:
                httpx.post(f"{targets.backend_url}/reset_prefix_cache", timeout=30)
            except httpx.HTTPError as error:
                log.warning("could not reset vLLM's prefix cache: %s", error)

    def warm_up(self, spec: RunSpec, targets: RunTargets, requests_file: Path | None) -> None:
        """Send the warm-up requests straight to the backend (never through the cache)."""
        model = spec.served_model_name or spec.model
        for messages in warmup_messages(spec, requests_file):
            self._check_cancel()
            try:
                response = httpx.post(
                    f"{targets.backend_url}/v1/chat/completions",
                    json={"model": model, "messages": messages, "max_tokens": min(spec.max_tokens, 16)},
                    timeout=600,
                )
            except httpx.HTTPError as error:
                raise RunFailed(f"warm-up request failed: {error}") from error
            if response.status_code != 200:
                raise RunFailed(f"warm-up request failed: HTTP {response.status_code}: {response.text[:500]}")

    def scrape_all(self, targets: RunTargets) -> dict[str, server_metrics.Snapshot | None]:
        """Both ends' /metrics; one that cannot be read is None, and its reason is kept for a warning."""
        urls = {"backend": targets.backend_url, **({"cache_proxy": targets.proxy_url} if targets.proxy_url else {})}
        snapshots: dict[str, server_metrics.Snapshot | None] = {}
        for name, url in urls.items():
            result = server_metrics.read_metrics(url)
            snapshots[name] = result.snapshot
            if result.problem:
                self.metrics_problems.setdefault(name, result.problem)
        return snapshots

    def _service_pids(self, targets: RunTargets) -> dict[str, int]:
        return {name: pid for name in targets.service_names if (pid := self.services.pid_of(name))}

    @staticmethod
    def _is_alive(process: psutil.Process | None) -> bool:
        # psutil's is_running() also checks the creation time, so a reused pid is not "alive".
        try:
            return process is not None and process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def drive_load(self, spec: RunSpec, targets: RunTargets, requests_file: Path | None) -> tuple[int, list[dict]]:
        """Run k6 to the end (or until cancelled or the backend dies); returns (exit code, resource samples)."""
        self.k6 = K6Process(
            script=script_path(spec.workload.kind),
            env=k6_environment(spec, target_url=targets.target_url, requests_file=requests_file),
            summary_path=self.run_dir / "summary.json",
            ndjson_path=self.run_dir / "k6.ndjson",
            log_path=self.run_dir / "k6.log",
        )
        pids = self._service_pids(targets)
        # Looked up once: the loop below checks these processes, not the database, every second.
        watched: dict[str, psutil.Process | None] = {}
        for name in targets.service_names:
            try:
                watched[name] = psutil.Process(pids[name]) if name in pids else None
            except psutil.NoSuchProcess:
                watched[name] = None
        sampler = ResourceSampler(lambda: {**pids, **({"k6": self.k6.pid} if self.k6 and self.k6.pid else {})})
        self.k6.start()
        sampler.start()
        started = time.monotonic()
        planned_s = spec.load.planned_duration_s
        self._status(RunStatus.RUNNING, load_started_at=store.utc_now())
        failure: str | None = None
        cancelled = False
        try:
            while self.k6.is_running():
                progress = self.k6.progress()
                elapsed_s = time.monotonic() - started
                done = progress.requests_completed or 0
                store.update_run(
                    engine=self.engine, run_id=self.run_id,
                    progress={
                        "elapsed_s": round(elapsed_s, 1), "planned_s": planned_s,
                        "fraction": min(1.0, elapsed_s / planned_s) if planned_s else None,
                        "requests_completed": progress.requests_completed,
                        "requests_failed": progress.requests_failed,
                        # Successes per second, like the final figure (failures do not count).
                        "req_per_s": round((done - (progress.requests_failed or 0)) / elapsed_s, 3)
                        if elapsed_s > 0 else None,
                        "vus": progress.vus, "output_tokens": progress.output_tokens,
                    },
                )
                self._sample_server_gauges(targets)
                if self._cancel_requested():
                    cancelled = True
                    self.k6.cancel(grace_s=20)
                    break
                for name, process in watched.items():
                    if name in self.lost_services or self._is_alive(process):
                        continue
                    if name in FAIL_OPEN_SERVICES:
                        log.warning("run %s: %s stopped during the run; the cache proxy fails open", self.run_id, name)
                        self.lost_services.append(name)
                    else:
                        failure = f"the {name} service died during the run (see its log below)"
                if failure:
                    self.k6.cancel(grace_s=20)
                    break
                time.sleep(1.0)
            exit_code = self.k6.wait()
        finally:
            samples = sampler.stop()
        if cancelled:
            raise RunCancelled()
        if failure:
            raise RunFailed(failure)
        return exit_code, samples

    def _sample_server_gauges(self, targets: RunTargets) -> None:
        """Requests running and waiting in the backend now (vLLM's gauges; the naive server's too)."""
        snapshot = server_metrics.scrape(targets.backend_url, timeout_s=2.0)
        if snapshot is None:
            return
        self.server_samples.append({
            "t": time.time(),
            "running_requests": snapshot.get("vllm:num_requests_running"),
            "waiting_requests": snapshot.get("vllm:num_requests_waiting"),
        })

    def collect(
        self,
        spec: RunSpec,
        targets: RunTargets,
        before: dict[str, server_metrics.Snapshot | None],
        samples: list[dict],
        *,
        partial: bool = False,
    ) -> dict[str, Any]:
        """Parse k6's outputs and the server metrics into run columns (and store the series)."""
        columns: dict[str, Any] = {}
        summary_path = self.run_dir / "summary.json"
        ndjson_path = self.run_dir / "k6.ndjson"
        figures: dict[str, Any] = {}
        if summary_path.is_file():
            figures = k6_results.parse_summary(summary_path)
            columns.update(
                requests_ok=figures["requests_ok"], requests_failed=figures["requests_failed"],
                req_per_s=figures["req_per_s"], output_tok_per_s=figures["output_tok_per_s"],
                input_tok_per_s=figures["input_tok_per_s"],
                latency_avg_s=figures["latency_avg_s"], latency_p50_s=figures["latency_p50_s"],
                latency_p90_s=figures["latency_p90_s"], latency_p95_s=figures["latency_p95_s"],
                latency_p99_s=figures["latency_p99_s"], latency_max_s=figures["latency_max_s"],
                iterations_completed=figures["iterations_completed"],
                iterations_interrupted=figures["iterations_interrupted"],
                iterations_dropped=figures["dropped_iterations"], measured_duration_s=figures["duration_s"],
            )
            if figures.get("cache_hit_rate") is not None:
                columns["response_cache_hit_rate"] = figures["cache_hit_rate"]
        series_doc: dict[str, Any] = {}
        if ndjson_path.is_file():
            series = k6_results.stream_series(ndjson_path)
            # Every per-bucket list of the series (time_s, requests_ok, latency_avg_s, vus, ...).
            series_doc = {
                item.name: getattr(series, item.name)
                for item in dataclasses.fields(series)
                if isinstance(getattr(series, item.name), list)
            }
            series_doc["start_epoch_s"] = series.start_epoch_s
            if not figures:  # no summary (k6 killed): figures from the stream
                totals = series.totals()
                duration = len(series.time_s) * series.bucket_s or None
                columns.update(
                    requests_ok=totals.get("requests_ok"), requests_failed=totals.get("requests_failed"),
                    req_per_s=(totals.get("requests_ok") or 0) / duration if duration else None,
                    output_tok_per_s=(totals.get("output_tokens") or 0) / duration if duration else None,
                    latency_avg_s=totals.get("latency_avg_s"), latency_p50_s=totals.get("latency_p50_s"),
                    latency_p90_s=totals.get("latency_p90_s"), latency_p95_s=totals.get("latency_p95_s"),
                    latency_p99_s=totals.get("latency_p99_s"), latency_max_s=totals.get("latency_max_s"),
                    measured_duration_s=duration,
                )
        # Resource samples joined on the same clock as k6's series.
        if samples:
            series_doc["resources"] = {key: [s.get(key) for s in samples] for key in samples[-1]}
        if self.server_samples:
            series_doc["server"] = {
                key: [s.get(key) for s in self.server_samples] for key in ("t", "running_requests", "waiting_requests")
            }
        log_tails = {name: self.services.log_tail(name, 30) for name in targets.service_names}
        store.save_run_series(engine=self.engine, run_id=self.run_id, series=series_doc, service_log_tails=log_tails)

        after = self.scrape_all(targets) if not partial else {}
        backend_change = server_metrics.delta(before.get("backend"), after.get("backend"))
        backend = server_metrics.backend_figures(backend_change)
        columns.update(
            prefix_cache_hit_rate=backend["prefix_cache_hit_rate"], server_ttft_avg_s=backend["server_ttft_avg_s"],
            server_time_per_output_token_avg_s=backend["server_time_per_output_token_avg_s"],
        )
        checks: dict[str, Any] = {}
        if targets.proxy_url:
            cache = server_metrics.cache_figures(server_metrics.delta(before.get("cache_proxy"), after.get("cache_proxy")))
            columns.update(
                response_cache_hits=cache["response_cache_hits"],
                response_cache_store_errors=cache["response_cache_store_errors"],
            )
            if cache["response_cache_hit_rate"] is not None:
                columns["response_cache_hit_rate"] = cache["response_cache_hit_rate"]
            checks["requests"] = server_metrics.count_check(
                client_count=figures.get("requests_total"), server_count=cache["proxy_requests"]
            )
            self.cache_errors = cache["response_cache_errors"] or 0
        elif backend["server_e2e_requests"] is not None:
            checks["requests"] = server_metrics.count_check(
                client_count=figures.get("requests_total"), server_count=backend["server_e2e_requests"]
            )
        if not targets.proxy_url:
            # Through the cache most answers never reach the backend: tokens only compare direct.
            if backend["server_output_tokens"] is not None:
                checks["output_tokens"] = server_metrics.count_check(
                    client_count=figures.get("output_tokens"), server_count=backend["server_output_tokens"]
                )
            if backend["server_prompt_tokens"] is not None:
                checks["input_tokens"] = server_metrics.count_check(
                    client_count=figures.get("input_tokens"), server_count=backend["server_prompt_tokens"]
                )
        columns["count_check"] = checks
        columns["server_metrics"] = {"before": before, "after": after, "delta": {"backend": backend_change}}
        if samples:
            k6_usage = summarise(samples, "k6")
            columns["k6_cpu_percent_avg"] = k6_usage["cpu_percent_avg"]
            if targets.backend_service:
                backend_usage = summarise(samples, targets.backend_service)
                columns["backend_cpu_percent_avg"] = backend_usage["cpu_percent_avg"]
                columns["backend_rss_max_mb"] = backend_usage["rss_max_mb"]
            gpu = [s["gpu_utilization_percent"] for s in samples if "gpu_utilization_percent" in s]
            columns["gpu_utilization_avg_percent"] = sum(gpu) / len(gpu) if gpu else None
            warnings = []
            if (k6_usage["cpu_percent_avg"] or 0) > K6_CPU_WARNING_PERCENT:
                warnings.append(
                    f"k6 used {k6_usage['cpu_percent_avg']:.0f}% of a core on average: the load generator may "
                    "have limited the load; compare with care"
                )
            if columns.get("iterations_dropped"):
                warnings.append(f"{columns['iterations_dropped']} iterations were dropped (arrival rate not reached)")
            columns["load_generator_warning"] = "; ".join(warnings) or None
        return columns

    # -- the whole run -----------------------------------------------------------------
    def execute(self) -> str:
        """Take the run from starting to a final state; returns that state."""
        targets: RunTargets | None = None
        before: dict[str, Any] = {}
        samples: list[dict] = []
        loaded = False
        spec: RunSpec | None = None
        try:
            with Session(self.engine) as session:
                run = store.get_run(session=session, run_id=self.run_id)
                if run is None:
                    raise RunFailed(f"run {self.run_id} was deleted before it started")
                try:
                    # Validated again now: a model folder or an allowed host may have gone since.
                    spec = RunSpec.model_validate(run.spec)
                except ValidationError as error:
                    raise RunFailed(f"the run's spec is no longer valid: {format_validation_error(error)}") from error
            # A run id can be reused after deletions (SQLite): never read another run's files.
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            run_environment = environment.capture(model=spec.model, k6_version=k6_version())
            store.update_run(engine=self.engine, run_id=self.run_id, environment=run_environment)
            targets = self.bring_up_services(spec)
            store.update_run(
                engine=self.engine, run_id=self.run_id,
                environment={**run_environment, "services": self.service_configs},
            )
            self._check_cancel()
            requests_file = self.prepare_workload(spec)
            self._status(RunStatus.WARMING)
            self.warm_up(spec, targets, requests_file)
            self.reset_caches(spec, targets)
            self._check_cancel()
            before = self.scrape_all(targets)
            loaded = True
            exit_code, samples = self.drive_load(spec, targets, requests_file)
            self._status(RunStatus.PARSING)
            if exit_code not in (0, 99) and self.k6 is not None:  # 99: thresholds crossed, figures valid
                raise RunFailed(self.k6.exit_message())
            if not (self.run_dir / "summary.json").is_file():
                raise RunFailed(f"k6 wrote no summary: {self.k6.exit_message() if self.k6 else describe_exit_code(exit_code)}")
            columns = self.collect(spec, targets, before, samples)
            if self.lost_services:
                note = (
                    f"{' and '.join(self.lost_services)} stopped during the run: the response cache failed open "
                    f"({self.cache_errors} answers served straight from the backend, "
                    f"{columns.get('response_cache_store_errors') or 0} not stored); the figures mix "
                    "cached and uncached answers"
                )
                self._add_warning(columns, note)
            if disk_note := self._run_folder_full():
                self._add_warning(columns, f"{disk_note}: the per-second series may be incomplete")
            for name, problem in self.metrics_problems.items():
                self._add_warning(columns, f"the {name.replace('_', ' ')}'s {problem}: its server-side figures are "
                                           "missing, the client's (k6) are kept")
            if not columns.get("requests_ok"):
                interrupted = columns.get("iterations_interrupted") or 0
                self._finish(
                    RunStatus.FAILED, **columns,
                    reason=(
                        f"no request completed successfully ({columns.get('requests_failed') or 0} failed, "
                        f"{interrupted} still in flight at the end): lengthen the duration or the graceful stop, "
                        "or check the backend's log"
                    ),
                )
                return RunStatus.FAILED
            self._finish(RunStatus.DONE, **columns)
            return RunStatus.DONE
        except (RunCancelled, ServiceStartAborted):
            self._finish(RunStatus.CANCELLED, reason="cancelled by the user",
                         **self._partial_columns(spec, targets, before, samples, loaded))
            return RunStatus.CANCELLED
        except Exception as error:  # noqa: BLE001 (any failure ends the run with its reason)
            problem = write_failure_message(error)
            if disk_note := self._run_folder_full():
                problem = f"{disk_note}: {problem or error}"
            if problem or isinstance(error, (RunFailed, k6_results.K6ResultsError)):
                # Expected failures (a full disk, a dead backend) are one line, not a traceback.
                log.error("run %s failed: %s", self.run_id, (problem or str(error)).splitlines()[0])
            else:
                log.exception("run %s failed", self.run_id)
            message = problem or str(error) or type(error).__name__
            self._finish(RunStatus.FAILED, reason=message[-4000:],
                         **self._partial_columns(spec, targets, before, samples, loaded))
            if targets is not None:
                self._stop_dead_services(targets)
            return RunStatus.FAILED
        except BaseException:
            # Ctrl-C or a stop signal: leave the run in a final state, never stuck "running",
            # with what k6 had written by then.
            try:
                columns = self._partial_columns(spec, targets, before, samples, loaded)
            except BaseException:  # noqa: BLE001 (a second stop signal: the state matters more)
                columns = {}
            self._finish(RunStatus.INTERRUPTED, reason="the lab was stopped during this run", **columns)
            raise
        finally:
            self._stop_k6()

    def _stop_k6(self) -> None:
        # SIGINT first: k6 still writes its summary, which the partial figures come from.
        if self.k6 is not None and self.k6.is_running():
            self.k6.cancel(grace_s=5)

    @staticmethod
    def _add_warning(columns: dict[str, Any], note: str) -> None:
        columns["load_generator_warning"] = "; ".join(filter(None, [columns.get("load_generator_warning"), note]))

    def _finish(self, status: str, *, reason: str | None = None, **columns: Any) -> None:
        """Write the run's final state with its reason and figures. A failing write is tried
        again, then without the figures (a smaller write), then left for the worker to write
        before its next run: a run never stays active because a write failed."""
        values: dict[str, Any] = {"status": status, "progress": None, "finished_at": store.utc_now(), **columns}
        if reason is not None:
            values["reason"] = reason
        bare = {key: values[key] for key in ("status", "progress", "finished_at", "reason") if key in values}
        problem = ""
        for attempt, delay_s in enumerate((0.0, *FINAL_WRITE_RETRY_DELAYS_S)):
            time.sleep(delay_s)
            if attempt == 2 and _is_out_of_space(problem) and (freed := self._free_run_folder_space()):
                # A full disk would keep the run active for good: its raw k6 stream (already
                # read into the figures) goes, so the final state fits.
                values["reason"] = f"{values.get('reason') or status} ({freed} removed to free space for this record)"
                bare["reason"] = values["reason"]
            # After two failures, the figures (the large part) may be what cannot be written.
            attempt_values = values if attempt < 3 else {
                **bare, "reason": f"{bare.get('reason') or status} (its figures could not be saved: {problem})"
            }
            try:
                store.set_run_status(engine=self.engine, run_id=self.run_id, **attempt_values)
                if attempt:
                    log.warning("run %s: its final state was written after %d failed tries", self.run_id, attempt)
                return
            except Exception as error:  # noqa: BLE001 (a database error, or a figure it cannot store)
                problem = write_failure_message(error) or f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        _unsaved_final_states[self.run_id] = attempt_values
        log.error("run %s ended %s but the database could not record it (%s); the worker tries again before "
                  "its next run", self.run_id, status, problem)

    def _free_run_folder_space(self) -> str | None:
        """Remove this run's largest regenerable files (k6's NDJSON, the request file); says which."""
        removed = []
        for name in ("k6.ndjson", "requests.json"):
            path = self.run_dir / name
            try:
                if path.is_file() and path.stat().st_size:
                    path.unlink()
                    removed.append(name)
            except OSError:
                continue
        return " and ".join(removed) or None

    def _partial_columns(
        self, spec: RunSpec | None, targets: RunTargets | None, before: dict, samples: list, loaded: bool
    ) -> dict[str, Any]:
        """Whatever k6 wrote before a failure, cancel or stop (figures; the series is stored too)."""
        if not loaded or targets is None or spec is None:
            return {}
        self._stop_k6()
        try:
            return self.collect(spec, targets, before, samples, partial=True)
        except Exception as error:  # noqa: BLE001 (partial data is best effort; the failure reason matters more)
            log.warning("run %s: partial figures not complete: %s", self.run_id,
                        write_failure_message(error) or f"{type(error).__name__}: {error}")
        # Nothing stored (a database error) or no readable summary (a full disk): the
        # figures from whichever of k6's files can still be read, without writing anything.
        try:
            summary = k6_results.parse_summary(self.run_dir / "summary.json")
            names = ("requests_ok", "requests_failed", "req_per_s", "output_tok_per_s", "input_tok_per_s",
                     "latency_avg_s", "latency_p50_s", "latency_p90_s", "latency_p95_s", "latency_p99_s",
                     "latency_max_s", "iterations_completed", "iterations_interrupted")
            return {name: summary.get(name) for name in names}
        except Exception:  # noqa: BLE001 (no summary, or an empty or truncated one)
            pass
        try:
            series = k6_results.stream_series(self.run_dir / "k6.ndjson")
        except Exception:  # noqa: BLE001 (no stream either: nothing to keep)
            return {}
        totals = series.totals()
        duration_s = len(series.time_s) * series.bucket_s or None
        return {
            "requests_ok": totals.get("requests_ok"), "requests_failed": totals.get("requests_failed"),
            "req_per_s": (totals.get("requests_ok") or 0) / duration_s if duration_s else None,
            "output_tok_per_s": (totals.get("output_tokens") or 0) / duration_s if duration_s else None,
            "measured_duration_s": duration_s,
            **{key: totals.get(key) for key in ("latency_avg_s", "latency_p50_s", "latency_p90_s", "latency_p95_s",
                                                "latency_p99_s", "latency_max_s")},
        }

    def _run_folder_full(self) -> str | None:
        """A sentence when the disk holding the run folder is (nearly) full, else None."""
        try:
            stats = os.statvfs(self.run_dir)
        except OSError:
            return None
        free_bytes = stats.f_bavail * stats.f_frsize
        if free_bytes >= RUN_FOLDER_MIN_FREE_BYTES:
            return None
        return (f"the disk holding the run folder is full ({free_bytes // 1024} kB free, No space left on device): "
                "k6 could not write all its results; free space and run again")

    def _stop_dead_services(self, targets: RunTargets) -> None:
        """After a failure, stop the services whose process died (and the cache proxy, cheap to
        restart) so the next run starts clean; the leftovers of a dead service go with it."""
        for name in targets.service_names:
            try:
                if self.services.pid_of(name) is None or name in ("cache-proxy",):
                    self.services.stop(name)
            except Exception as error:  # noqa: BLE001 (one service's record must not keep the others running)
                log.error("run %s: could not stop %s: %s", self.run_id, name,
                          write_failure_message(error) or f"{type(error).__name__}: {error}")


class WorkerBusyError(RuntimeError):
    """Another worker already executes this lab's queue."""


class DatabaseReplacedError(RuntimeError):
    """The worker's SQLite file was removed or replaced under it."""


class WorkerLock:
    """An exclusive lock file: one worker per data directory, so never two k6 at once."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "worker.lock"
        self._handle: Any = None

    def acquire(self) -> None:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            handle.close()
            raise WorkerBusyError(f"another lab worker holds {self.path}") from error
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> "WorkerLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class Worker:
    """The queue worker: one run at a time, independent of browser tabs and reruns."""

    def __init__(self, *, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.services = ServiceManager(engine=engine, settings=settings, owner_pid=os.getpid())
        self._stop = threading.Event()
        # The SQLite file this worker's connections use (the engine has just opened it).
        self._database = sqlite_file_identity(settings.resolved_database_url)

    def recover(self) -> None:
        """After a crash: mark runs left active as interrupted and stop stale services.

        Called while holding the worker lock, so no other worker can own an active run.
        """
        interrupted = store.mark_orphaned_runs_interrupted(engine=self.engine)
        stale = self.services.stop_stale()
        k6_pids = self._stop_orphaned_k6(interrupted)
        if interrupted or stale or k6_pids:
            log.warning(
                "recovered: runs interrupted %s, stale services stopped %s, orphaned k6 stopped %s",
                interrupted, stale, k6_pids,
            )

    def _stop_orphaned_k6(self, run_ids: list[int]) -> list[int]:
        """Stop the k6 processes a killed worker left loading (found by their run folder in argv)."""
        if not run_ids:
            return []
        folders = [f"{self.settings.runs_dir / str(run_id)}{os.sep}" for run_id in run_ids]
        stopped = []
        for process in psutil.process_iter(["cmdline"]):
            try:
                argv = process.info["cmdline"] or []
                if argv and Path(argv[0]).name == "k6" and any(folder in arg for arg in argv for folder in folders):
                    stop_process_tree(process.pid, grace_s=5.0)
                    stopped.append(process.pid)
            except psutil.Error:
                continue
        return stopped

    def run_one(self) -> int | None:
        """Execute the next queued run, if any; returns its id."""
        save_pending_final_states(self.engine)
        run_id = store.claim_next_run(engine=self.engine, worker_pid=os.getpid())
        if run_id is None:
            return None
        RunExecutor(engine=self.engine, settings=self.settings, services=self.services, run_id=run_id).execute()
        return run_id

    def run_until_empty(self) -> list[int]:
        done = []
        while (run_id := self.run_one()) is not None:
            done.append(run_id)
        return done

    def run_forever(self) -> None:
        """Execute queued runs until stopped. Raises WorkerBusyError if another worker runs."""
        with WorkerLock(self.settings.data_dir):
            self.recover()
            claim_problem: str | None = None
            while not self._stop.is_set():
                if self._database and sqlite_file_identity(self.settings.resolved_database_url) != self._database:
                    # Its open connections would go on with the removed file while the CLI
                    # and the pages use a new one: nothing queued there would ever run.
                    raise DatabaseReplacedError(
                        f"the database file {make_url(self.settings.resolved_database_url).database} was removed "
                        "or replaced while the worker ran; start the lab again"
                    )
                try:
                    ran = self.run_one()
                    claim_problem = None
                except Exception as error:  # noqa: BLE001 (the worker must outlive any one run)
                    if problem := write_failure_message(error):
                        if problem != claim_problem:  # once, not every poll, while the disk stays full
                            log.error("the worker could not claim a run: %s; going on", problem)
                        claim_problem = problem
                    else:
                        log.exception("the worker hit an error between runs; going on")
                    ran = None
                if ran is None:
                    self._stop.wait(self.settings.worker_poll_interval_s)

    def stop(self) -> None:
        self._stop.set()
