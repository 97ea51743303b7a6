"""The runner: executes queued runs one at a time, reporting every step to the database.

``Worker.run_forever`` claims the oldest queued run it may take, and ``RunExecutor`` takes it through
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
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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
from db.engine import get_engine
from db.models import RunStatus
from lab.measurement import environment
from lab.execution import experiments
from lab.measurement import k6_results
from lab.measurement import live
from lab.measurement import request_figures
from lab.measurement import server_metrics
from lab.backends import Backend, get_backend, managed_backend_names
from lab.execution.k6_driver import K6Process, describe_exit_code, k6_environment, k6_version, script_path
from lab.measurement.checks import join_warnings, measurement_warnings, steady_throughput
from lab.measurement.resources import ResourceSampler, summarise, summarise_host
from lab.measurement.results import RunResults
from lab.settings import Settings
from lab.specs.schema import RunSpec, format_validation_error
from lab.execution.worker_identity import worker_hardware
from lab.workloads import WorkloadError, get_workload
from services.catalog import cache_proxy_config, redis_config
from services.manager import ServiceManager
from services.supervisor import ServiceStartAborted, stop_process_tree

log = logging.getLogger("lab.execution.runner")

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




def warmup_messages(spec: RunSpec, requests_file: Path | None) -> list[list[dict[str, str]]]:
    """The messages of the warm-up requests (the workload's own first requests)."""
    return get_workload(spec.workload.kind).warmup_messages(spec, requests_file)


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
        # Server-side gauges and counters sampled once a second during the load (running and
        # waiting requests; output tokens and completed requests so far, for the steady rates).
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
        base, backend = spec.base_backend, spec.backend_kind
        if not backend.managed:
            backend_url, backend_service = str(spec.target_url).rstrip("/"), None
        else:
            # One accelerator (or two CPU cores): by default never measure with another backend loaded.
            # Stopped only here, when this run needs another one: the backend a run leaves stays
            # warm for the next cell with its configuration (the queue is grouped by backend).
            if self.settings.stop_idle_backends:
                for other in managed_backend_names():
                    if other != base:
                        self.services.stop(other)
            self._check_cancel()
            config = backend.service_config(model=spec.model, options=spec.backend_options(), settings=self.settings)
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
        """Write the request file the workload's k6 script replays (None if it needs none)."""
        try:
            return get_workload(spec.workload.kind).prepare(spec, self.run_dir, spec.backend_kind)
        except WorkloadError as error:
            raise RunFailed(str(error)) from error

    def reset_caches(self, spec: RunSpec, targets: RunTargets) -> None:
        """Empty the response cache and the backend's own caches so the run starts cold."""
        if spec.keep_caches_warm:
            return
        if targets.proxy_url:
            response = httpx.post(f"{targets.proxy_url}/cache/flush", timeout=30)
            if response.status_code >= 400:
                raise RunFailed(f"could not flush the response cache: HTTP {response.status_code}")
        if targets.backend_service:
            warning = spec.backend_kind.reset_caches(targets.backend_url)
            if warning:
                log.warning("run %s: %s", self.run_id, warning)

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

    def fill_cache(self, spec: RunSpec, targets: RunTargets, requests_file: Path | None) -> None:
        """Run the workload unmeasured through the cache until it has stored every distinct
        request (``cache.fill_first_up_to``), so the measured load sees the hit path's steady state."""
        wanted = get_workload(spec.workload.kind).distinct_requests(spec) or 0
        env = k6_environment(spec, target_url=targets.target_url, requests_file=requests_file)
        # The same requests from the same VUs, for as long as filling may take.
        env.update(LOAD_KIND="constant-vus", VUS=str(spec.load.peak_vus), DURATION=f"{spec.cache.fill_timeout_s:g}s")
        fill_dir = self.run_dir / "fill"
        k6 = K6Process(script=script_path(spec.workload.kind), env=env, summary_path=fill_dir / "summary.json",
                       ndjson_path=fill_dir / "k6.ndjson", log_path=fill_dir / "k6.log")
        stored_before = self._cache_stores(targets)
        began = time.monotonic()
        stored = 0
        k6.start()
        try:
            while k6.is_running() and stored < wanted:
                self._check_cancel()
                time.sleep(1)
                stored = self._cache_stores(targets) - stored_before
        finally:
            if k6.is_running():
                k6.cancel(grace_s=30)
            shutil.rmtree(fill_dir, ignore_errors=True)  # unmeasured: nothing of it is kept
        if stored < wanted:
            raise RunFailed(f"the response cache stored {stored:.0f} of {wanted} distinct requests in "
                            f"{time.monotonic() - began:.0f} s (cache.fill_timeout_s {spec.cache.fill_timeout_s:g})")
        log.info("run %s: cache filled with %d distinct requests in %.0f s", self.run_id, wanted,
                 time.monotonic() - began)

    @staticmethod
    def _cache_stores(targets: RunTargets) -> float:
        """The proxy's count of answers stored so far."""
        snapshot = server_metrics.scrape(targets.proxy_url or "") or {}
        return float(snapshot.get("lab_cache_stores_total") or 0.0)

    def scrape_all(self, spec: RunSpec, targets: RunTargets) -> dict[str, server_metrics.Snapshot | None]:
        """Both ends' /metrics; one that cannot be read is None, and its reason is kept for a warning."""
        sources = {"backend": (targets.backend_url, spec.backend_kind.metrics.prefixes)}
        if targets.proxy_url:
            sources["cache_proxy"] = (targets.proxy_url, server_metrics.CACHE_PROXY_PREFIXES)
        snapshots: dict[str, server_metrics.Snapshot | None] = {}
        for name, (url, prefixes) in sources.items():
            result = server_metrics.read_metrics(url, prefixes=prefixes)
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
        load_started_epoch_s = time.time()
        # k6's NDJSON read a little each second: the live charts and counts of workload
        # requests only (k6's API counts its setup health check too).
        tail = live.NdjsonTail(self.run_dir / "k6.ndjson")
        failure: str | None = None
        cancelled = False
        try:
            while self.k6.is_running():
                progress = self.k6.progress()
                elapsed_s = time.monotonic() - started
                tail.read_new()
                done, failed = tail.requests_ok_total, tail.requests_failed_total
                draining = bool(planned_s) and elapsed_s >= planned_s
                store.update_run(
                    engine=self.engine, run_id=self.run_id,
                    progress={
                        # load, then draining: the graceful stop waits for the requests still in flight.
                        "phase": "draining" if draining else "load",
                        "in_flight": progress.vus,
                        "elapsed_s": round(elapsed_s, 1), "planned_s": planned_s,
                        "graceful_stop_s": spec.load.graceful_stop_s,
                        "fraction": min(1.0, elapsed_s / planned_s) if planned_s else None,
                        "requests_completed": done + failed,
                        "requests_failed": failed,
                        # Successes per second, like the final figure (failures do not count).
                        "req_per_s": round(done / elapsed_s, 3) if elapsed_s > 0 else None,
                        "vus": progress.vus, "output_tokens": progress.output_tokens,
                        "live": live.live_progress(tail, origin_epoch_s=load_started_epoch_s,
                                                   resource_samples=sampler.samples,
                                                   server_samples=self.server_samples),
                    },
                )
                self._sample_server_gauges(spec.backend_kind, targets)
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

    def _sample_server_gauges(self, backend: Backend, targets: RunTargets) -> None:
        """Requests running and waiting in the backend now, and its token and request counters
        (those it exports)."""
        snapshot = server_metrics.scrape(targets.backend_url, prefixes=backend.metrics.prefixes, timeout_s=2.0)
        if snapshot is None:
            return
        self.server_samples.append({
            "t": time.time(), **server_metrics.gauges(snapshot, backend.metrics),
            **server_metrics.counters(snapshot, backend.metrics),
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
        """Parse k6's outputs and the server metrics into run columns (and store the series).

        The figures go into one :class:`RunResults` (every producer names its figures like
        its fields); the columns are its fields plus the cross-checks and raw metrics.
        """
        summary_path = self.run_dir / "summary.json"
        ndjson_path = self.run_dir / "k6.ndjson"
        figures: dict[str, Any] = k6_results.parse_summary(summary_path) if summary_path.is_file() else {}
        results = RunResults.from_figures(figures)
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
            series_doc["bucket_s"] = series.bucket_s
            if not figures:  # no summary (k6 killed): figures from the stream
                results = RunResults.from_figures(series.figures())
        # Resource samples joined on the same clock as k6's series.
        if samples:
            series_doc["resources"] = {key: [s.get(key) for s in samples] for key in samples[-1]}
        if self.server_samples:
            series_doc["server"] = {
                key: [s.get(key) for s in self.server_samples]
                for key in ("t", "running_requests", "waiting_requests", "output_tokens", "requests")
            }
        log_tails = {name: self.services.log_tail(name, 30) for name in targets.service_names}
        store.save_run_series(engine=self.engine, run_id=self.run_id, series=series_doc, service_log_tails=log_tails)
        if ndjson_path.is_file():
            # Every request's figures, so any SLO can be evaluated on this run later.
            samples_per_request = k6_results.stream_request_samples(ndjson_path)
            store.save_run_requests(engine=self.engine, run_id=self.run_id, **request_figures.encode(samples_per_request))

        after = self.scrape_all(spec, targets) if not partial else {}
        backend_change = server_metrics.delta(before.get("backend"), after.get("backend"))
        backend = server_metrics.backend_figures(backend_change, spec.backend_kind.metrics)
        results = results.updated(backend)
        checks: dict[str, Any] = {}
        if targets.proxy_url:
            cache = server_metrics.cache_figures(server_metrics.delta(before.get("cache_proxy"), after.get("cache_proxy")))
            results = results.updated(cache)
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
            # Requests still in flight at the graceful stop were (partly) served but never counted by
            # k6: the server may count up to this many tokens more for each without anything wrong.
            interrupted = figures.get("requests_interrupted") or 0
            completed = figures.get("requests_total") or 0
            mean_prompt_tokens = (figures.get("input_tokens") or 0) / completed if completed else 0
            if backend["server_output_tokens"] is not None:
                checks["output_tokens"] = server_metrics.count_check(
                    client_count=figures.get("output_tokens"), server_count=backend["server_output_tokens"],
                    in_flight_allowance=interrupted * spec.max_tokens,
                )
            if backend["server_prompt_tokens"] is not None:
                checks["input_tokens"] = server_metrics.count_check(
                    client_count=figures.get("input_tokens"), server_count=backend["server_prompt_tokens"],
                    in_flight_allowance=interrupted * mean_prompt_tokens * 2,
                )
        if samples:
            results = results.updated(self._resource_figures(samples, targets))
        results = results.updated(self._steady_figures(spec, targets, series_doc, figures, backend))
        results = results.updated({"measurement_warnings": join_warnings(*measurement_warnings(
            k6_cpu_percent_avg=results.k6_cpu_percent_avg, iterations_dropped=results.iterations_dropped,
            other_cpu_percent_avg=results.other_cpu_percent_avg,
            contention_threshold_percent=self.settings.contention_warning_cpu_percent,
            count_check=checks, latency_avg_s=results.latency_avg_s, load_duration_s=spec.load.planned_duration_s,
        ))})
        return {
            **results.as_columns(),
            "count_check": checks,
            "server_metrics": {"before": before, "after": after, "delta": {"backend": backend_change}},
        }

    @staticmethod
    def _resource_figures(samples: list[dict], targets: RunTargets) -> dict[str, Any]:
        """Resource use while the load ran: k6, the backend, the GPU and the rest of the machine."""
        figures: dict[str, Any] = {"k6_cpu_percent_avg": summarise(samples, "k6")["cpu_percent_avg"]}
        if targets.backend_service:
            backend_usage = summarise(samples, targets.backend_service)
            figures["backend_cpu_percent_avg"] = backend_usage["cpu_percent_avg"]
            figures["backend_rss_max_mb"] = backend_usage["rss_max_mb"]
        gpu = [s["gpu_utilization_percent"] for s in samples if "gpu_utilization_percent" in s]
        figures["gpu_utilization_avg_percent"] = sum(gpu) / len(gpu) if gpu else None
        host = summarise_host(samples)
        figures["other_cpu_percent_avg"] = host["other_cpu_percent_avg"]
        figures["steal_cpu_percent_avg"] = host["steal_cpu_percent_avg"]
        return figures

    @staticmethod
    def _steady_figures(
        spec: RunSpec, targets: RunTargets, series_doc: dict[str, Any], figures: dict[str, Any],
        backend: dict[str, Any],
    ) -> dict[str, Any]:
        """Steady-state throughput in the load window: the backend's counters, else k6's series
        (always k6's behind the response cache: the backend sees only the misses)."""
        server = (series_doc.get("server") or {}) if not targets.proxy_url else {}
        client_start = series_doc.get("start_epoch_s")
        bucket_s = float(series_doc.get("bucket_s") or 1.0)
        load_start = (server.get("t") or [None])[0] or client_start
        if server and backend.get("server_output_tokens") and backend.get("server_e2e_requests"):
            tokens_per_request = backend["server_output_tokens"] / backend["server_e2e_requests"]
        elif figures.get("output_tokens") and figures.get("requests_ok"):
            tokens_per_request = figures["output_tokens"] / figures["requests_ok"]
        else:
            tokens_per_request = None
        steady = steady_throughput(
            load_start_epoch_s=load_start, load_duration_s=spec.load.planned_duration_s,
            server_times_epoch_s=server.get("t") or (),
            server_output_tokens=server.get("output_tokens") or (),
            server_requests=server.get("requests") or (),
            # A bucket's completions are counted at its end.
            client_times_epoch_s=[client_start + t + bucket_s for t in series_doc.get("time_s") or ()]
            if client_start is not None else (),
            client_output_tokens=series_doc.get("output_tokens") or (),
            client_requests_ok=series_doc.get("requests_ok") or (),
            tokens_per_request=tokens_per_request,
        )
        return steady.as_figures()

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
            backend_pid_before = self.services.pid_of(spec.base_backend)
            startup_began = time.monotonic()
            targets = self.bring_up_services(spec)
            # A fresh start's duration is what the next run of this configuration is told to expect.
            startup = {"seconds": round(time.monotonic() - startup_began, 1),
                       "fresh": self.services.pid_of(spec.base_backend) not in (None, backend_pid_before)}
            store.update_run(
                engine=self.engine, run_id=self.run_id,
                environment={**run_environment, "services": self.service_configs, "startup": startup},
            )
            self._check_cancel()
            requests_file = self.prepare_workload(spec)
            self._status(RunStatus.WARMING)
            self.warm_up(spec, targets, requests_file)
            self.reset_caches(spec, targets)
            self._check_cancel()
            if spec.fills_cache_first:
                self.fill_cache(spec, targets, requests_file)
            before = self.scrape_all(spec, targets)
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
        columns["measurement_warnings"] = join_warnings(columns.get("measurement_warnings"), note)

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
    """An exclusive lock file: one worker per data directory (its run folders and service
    logs), so never two k6 at once there. Workers with their own folders share a queue."""

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
    """A queue worker: one run at a time, independent of browser tabs and reruns.

    It has a name (the host's by default) and labels; on a shared PostgreSQL queue many
    workers on many machines claim runs side by side. While serving it renews a heartbeat
    and interrupts the runs of workers whose heartbeat is older than the lease.
    """

    def __init__(
        self, *, engine: Engine, settings: Settings, name: str | None = None, labels: list[str] | None = None
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.name = name or settings.worker_name
        self.labels = sorted(set(settings.worker_labels if labels is None else labels))
        self.hardware = worker_hardware()
        self.services = ServiceManager(
            engine=engine, logs_dir=settings.logs_dir, owner_pid=os.getpid(), worker=self.name
        )
        self._stop = threading.Event()
        # The SQLite file this worker's connections use (the engine has just opened it).
        self._database = sqlite_file_identity(settings.resolved_database_url)
        self._heartbeat_stop = threading.Event()
        self._current_run_id: int | None = None

    def register(self) -> None:
        """Take this worker's name on the queue. Raises WorkerBusyError while a live worker
        elsewhere holds it (its heartbeat younger than the lease)."""
        host = socket.gethostname()
        with Session(self.engine) as session:
            record = store.get_worker(session=session, name=self.name)
            age_s = store.heartbeat_age_s(session=session, record=record) if record is not None else None
            if record is not None and record.state == "running" and age_s is not None \
                    and age_s < self.settings.worker_lease_s:
                # Same host and its process gone: this is a restart, not a second worker.
                restarted = record.host == host and (
                    record.pid == os.getpid() or not psutil.pid_exists(record.pid or 0)
                )
                if not restarted:
                    raise WorkerBusyError(
                        f"a worker named {self.name!r} is alive on {record.host} (pid {record.pid}, heartbeat "
                        f"{age_s:.0f} s ago): give this one another --name"
                    )
        store.register_worker(
            engine=self.engine, name=self.name, host=host, pid=os.getpid(), labels=self.labels, hardware=self.hardware
        )

    def recover(self) -> None:
        """After a crash: mark this worker's runs left active as interrupted and stop its stale services.

        Called while holding the worker lock and the name, so no other process runs them.
        Other workers' runs are left to their lease (``reap_lost_workers``).
        """
        interrupted = store.mark_orphaned_runs_interrupted(engine=self.engine, worker_name=self.name)
        stale = self.services.stop_stale()
        k6_pids = self._stop_orphaned_k6(interrupted)
        if interrupted or stale or k6_pids:
            log.warning(
                "recovered: runs interrupted %s, stale services stopped %s, orphaned k6 stopped %s",
                interrupted, stale, k6_pids,
            )

    def reap_lost_workers(self) -> list[int]:
        """Interrupt the active runs of workers silent for longer than the lease."""
        interrupted = store.interrupt_runs_of_lost_workers(
            engine=self.engine, lease_s=self.settings.worker_lease_s, except_worker=self.name
        )
        if interrupted:
            log.warning("interrupted runs %s of workers that stopped renewing their heartbeat", interrupted)
        return interrupted

    def heartbeat(self) -> None:
        """Say this worker is alive (and what it runs), then reap lost workers' runs."""
        store.renew_worker_heartbeat(engine=self.engine, name=self.name, current_run_id=self._current_run_id)
        self.reap_lost_workers()

    def _heartbeat_loop(self) -> None:
        # Its own thread: a worker busy with a long run still renews its lease and reaps.
        while not self._heartbeat_stop.wait(self.settings.worker_heartbeat_interval_s):
            try:
                self.heartbeat()
            except Exception:  # noqa: BLE001 (a database hiccup must not end the worker)
                log.exception("heartbeat failed; retrying")

    @contextmanager
    def serving(self) -> Iterator["Worker"]:
        """Registered, recovered and heart-beating for the duration of the block."""
        self.register()
        self.recover()
        self.reap_lost_workers()
        self._heartbeat_stop.clear()
        thread = threading.Thread(target=self._heartbeat_loop, name="worker-heartbeat", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._heartbeat_stop.set()
            thread.join(timeout=10)
            try:
                store.mark_worker_stopped(engine=self.engine, name=self.name)
            except Exception:  # noqa: BLE001 (stopping anyway; the lease covers a missed update)
                log.exception("could not mark worker %s stopped", self.name)

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
        """Execute the next queued run this worker may take, if any; returns its id."""
        save_pending_final_states(self.engine)
        run_id = store.claim_next_run(
            engine=self.engine, worker_name=self.name, labels=self.labels, hardware=self.hardware,
            worker_pid=os.getpid(),
        )
        if run_id is None:
            return None
        self._current_run_id = run_id
        try:
            RunExecutor(engine=self.engine, settings=self.settings, services=self.services, run_id=run_id).execute()
        finally:
            self._current_run_id = None
        self._record_wall_time_ratio(run_id)
        return run_id

    def _record_wall_time_ratio(self, run_id: int) -> None:
        """Update the run's experiment's wall-time ratio (the lab's overhead so far)."""
        try:
            with Session(self.engine) as session:
                run = store.get_run(session=session, run_id=run_id)
                experiments.record_wall_time_ratio(session=session, experiment_id=run.experiment_id if run else None)
        except SQLAlchemyError as error:  # a figure about the lab itself: never worth failing the worker
            log.warning("could not store the wall-time ratio: %s", write_failure_message(error))

    def run_forever(self) -> None:
        """Execute queued runs until stopped. Raises WorkerBusyError if another worker runs
        on this data folder, or a live one elsewhere has this worker's name."""
        with WorkerLock(self.settings.data_dir), self.serving():
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


def stop_own_services(manager: ServiceManager) -> None:
    """Stop every service this process started, each on its own: one whose record cannot be
    written (a full disk) must not leave the next one running. One line per failure."""
    try:
        with Session(manager.engine) as session:
            names = [record.name for record in store.list_service_records(session=session)
                     if record.owner_pid == manager.owner_pid]
    except SQLAlchemyError as error:
        print(f"error: cannot read the services' records ({str(getattr(error, 'orig', error)).splitlines()[0]})",
              file=sys.stderr)
        return
    order = {"cache-proxy": 0, "redis": 1}  # dependants first
    for name in sorted(names, key=lambda n: order.get(n, 9)):
        try:
            manager.stop(name)
        except (SQLAlchemyError, OSError) as error:
            detail = str(getattr(error, "orig", None) or error).splitlines()[0]
            print(f"error: {name} was stopped but its record could not be written ({detail})", file=sys.stderr)



class WorkerUnusableError(RuntimeError):
    """The worker that holds the lock can never execute the queued runs."""


def _worker_on_removed_database(settings: Settings) -> int | None:
    """The pid of the lock-holding worker if it still uses a removed SQLite file (Linux /proc)."""
    url = make_url(settings.resolved_database_url)
    if url.get_backend_name() != "sqlite" or not url.database:
        return None
    try:
        pid = int((settings.data_dir / "worker.lock").read_text().strip())
        targets = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except (OSError, ValueError):
        return None
    removed = f"{Path(url.database).resolve()} (deleted)"
    return pid if removed in targets else None


def wait_for_runs(*, settings: Settings, run_ids: list[int], poll_s: float = 2.0, quiet: bool = False) -> None:
    """Wait until every run of ``run_ids`` is final: execute the queue here (holding the worker
    lock) if no worker runs on this data folder; else (or for runs this machine may not take)
    wait for the lab's workers, printing progress to stderr.

    Raises ``WorkerUnusableError`` when the waiting could never end (a database file
    removed or replaced under the worker or this process).
    """
    with RunWaiter(settings=settings, poll_s=poll_s, quiet=quiet) as waiter:
        waiter.wait(run_ids)


class RunWaiter:
    """``wait_for_runs`` over several batches: between two ``wait`` calls the worker this
    process runs keeps its lock and the services it started (a capacity search queues its
    probes one at a time and must not restart vLLM for each). ``close`` stops them."""

    def __init__(self, *, settings: Settings, poll_s: float = 2.0, quiet: bool = False) -> None:
        self.settings, self.poll_s, self.quiet = settings, poll_s, quiet
        self.engine = get_engine(settings.resolved_database_url)
        self._database = sqlite_file_identity(settings.resolved_database_url)
        self._lock = WorkerLock(settings.data_dir)
        self._worker: Worker | None = None
        self._serving: Any = None

    def __enter__(self) -> "RunWaiter":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open_worker(self) -> bool:
        """Become this data folder's worker; False when another one is."""
        try:
            self._lock.acquire()
        except WorkerBusyError:
            if (pid := _worker_on_removed_database(self.settings)) is not None:
                raise WorkerUnusableError(
                    f"the lab's worker (pid {pid}) still uses a database file that was removed, so it never sees "
                    "these runs: stop it or start the lab again, then run again"
                ) from None
            return False
        worker = Worker(engine=self.engine, settings=self.settings)
        serving = worker.serving()
        try:
            serving.__enter__()
        except WorkerBusyError:  # a live worker elsewhere has this host's name: it takes them
            self._lock.release()
            return False
        self._worker, self._serving = worker, serving
        return True

    def close(self) -> None:
        """Stop the services this process's worker started and give the lock back."""
        if self._worker is None:
            return
        worker, serving = self._worker, self._serving
        self._worker = self._serving = None
        try:
            serving.__exit__(None, None, None)
        finally:
            stop_own_services(worker.services)
            self._lock.release()

    def wait(self, run_ids: list[int]) -> None:
        last_line = ""
        while True:
            if self._database and sqlite_file_identity(self.settings.resolved_database_url) != self._database:
                raise WorkerUnusableError("the lab's database file was removed or replaced while waiting for the runs")
            with Session(self.engine) as session:
                runs = store.list_runs(session=session, run_ids=run_ids)
                if all(run.status in RunStatus.FINAL for run in runs):
                    return
            ran_any = False
            if self._worker is not None or self._open_worker():
                assert self._worker is not None
                ran_any = _run_pending(worker=self._worker, engine=self.engine, run_ids=run_ids, quiet=self.quiet)
                if not ran_any:
                    self.close()  # runs for other workers: do not hold the lock while they run
            if not ran_any:
                line = ", ".join(f"#{r.id} {r.status}" for r in runs)
                if line != last_line and not self.quiet:
                    print(f"waiting for the lab's workers: {line}", file=sys.stderr)
                    last_line = line
                time.sleep(self.poll_s)


def _run_pending(*, worker: "Worker", engine: Engine, run_ids: list[int], quiet: bool) -> bool:
    """Execute queued runs while some of ``run_ids`` are pending; True if any ran."""
    ran_any = False
    while True:
        with Session(engine) as session:
            pending = [r for r in store.list_runs(session=session, run_ids=run_ids) if r.status not in RunStatus.FINAL]
        if not pending:
            return ran_any
        run_id = worker.run_one()
        if run_id is None:
            return ran_any
        ran_any = True
        if not quiet:
            with Session(engine) as session:
                run = store.get_run(session=session, run_id=run_id)
                print(f"run #{run_id} {run.cell_label} repeat {run.repeat_index}: {run.status}"
                      + (f" ({run.status_reason.splitlines()[0]})" if run.status_reason else ""),
                      file=sys.stderr)
