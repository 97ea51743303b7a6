"""The runner: executes queued runs one at a time, reporting every step to the database.

``Worker.run_forever`` claims the oldest queued run, and ``RunExecutor`` takes it through
starting (services up) -> warming -> running (k6) -> parsing -> done | failed | cancelled.
Nothing here imports Streamlit: pages only read what is written to the database.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy import Engine
from pydantic import ValidationError
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus
from lab import environment, k6_results, server_metrics
from lab.backends import Backend, get_backend, managed_backend_names
from lab.k6_driver import K6Process, describe_exit_code, k6_binary, script_path
from lab.resources import ResourceSampler, summarise
from lab.settings import Settings
from lab.specs import RunSpec, format_validation_error
from lab.workloads import WorkloadError, get_workload
from services.catalog import cache_proxy_config, redis_config
from services.manager import ServiceManager
from services.supervisor import ServiceStartAborted, stop_process_tree

log = logging.getLogger("lab.runner")

# k6 using more than this share of a core on average may have limited the load it applied.
K6_CPU_WARNING_PERCENT = 80.0
# Services a run survives losing: the cache proxy fails open without Redis (answers come
# from the backend, store errors are counted), so the run goes on and says so.
FAIL_OPEN_SERVICES = ("redis",)


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
        **get_workload(spec.workload.kind).k6_env(spec),
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
        # Server-side gauges sampled once a second during the load (running, waiting requests).
        self.server_samples: list[dict[str, float | None]] = []

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

    def scrape_all(self, spec: RunSpec, targets: RunTargets) -> dict[str, server_metrics.Snapshot | None]:
        snapshots: dict[str, server_metrics.Snapshot | None] = {
            "backend": server_metrics.scrape(targets.backend_url, prefixes=spec.backend_kind.metrics.prefixes)
        }
        if targets.proxy_url:
            snapshots["cache_proxy"] = server_metrics.scrape(targets.proxy_url)
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
        """Requests running and waiting in the backend now (if it exports them)."""
        snapshot = server_metrics.scrape(targets.backend_url, prefixes=backend.metrics.prefixes, timeout_s=2.0)
        if snapshot is None:
            return
        self.server_samples.append({"t": time.time(), **server_metrics.gauges(snapshot, backend.metrics)})

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

        after = self.scrape_all(spec, targets) if not partial else {}
        backend_change = server_metrics.delta(before.get("backend"), after.get("backend"))
        backend = server_metrics.backend_figures(backend_change, spec.backend_kind.metrics)
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
                columns["load_generator_warning"] = "; ".join(filter(None, [columns.get("load_generator_warning"), note]))
            if not columns.get("requests_ok"):
                interrupted = columns.get("iterations_interrupted") or 0
                self._status(
                    RunStatus.FAILED, progress=None, **columns,
                    reason=(
                        f"no request completed successfully ({columns.get('requests_failed') or 0} failed, "
                        f"{interrupted} still in flight at the end): lengthen the duration or the graceful stop, "
                        "or check the backend's log"
                    ),
                )
                return RunStatus.FAILED
            self._status(RunStatus.DONE, progress=None, **columns)
            return RunStatus.DONE
        except (RunCancelled, ServiceStartAborted):
            self._keep_partial(spec, targets, before, samples, loaded)
            self._status(RunStatus.CANCELLED, reason="cancelled by the user", progress=None)
            return RunStatus.CANCELLED
        except Exception as error:  # noqa: BLE001 (any failure ends the run with its reason)
            log.exception("run %s failed", self.run_id)
            self._keep_partial(spec, targets, before, samples, loaded)
            message = str(error) or type(error).__name__
            self._status(RunStatus.FAILED, reason=message[-4000:], progress=None)
            if targets is not None:
                self._stop_dead_services(targets)
            return RunStatus.FAILED
        except BaseException:
            # Ctrl-C or a stop signal: leave the run in a final state, never stuck "running".
            self._status(RunStatus.INTERRUPTED, reason="the lab was stopped during this run", progress=None)
            raise
        finally:
            if self.k6 is not None and self.k6.is_running():
                self.k6.cancel(grace_s=5)

    def _keep_partial(
        self, spec: RunSpec | None, targets: RunTargets | None, before: dict, samples: list, loaded: bool
    ) -> None:
        """Keep whatever k6 wrote before a failure or cancel (figures and series)."""
        if not loaded or targets is None or spec is None:
            return
        try:
            columns = self.collect(spec, targets, before, samples, partial=True)
            store.update_run(engine=self.engine, run_id=self.run_id, **columns)
        except Exception:  # noqa: BLE001 (partial data is best effort; the failure reason matters more)
            log.exception("could not keep partial data of run %s", self.run_id)

    def _stop_dead_services(self, targets: RunTargets) -> None:
        """After a failure, stop the services whose process died (and the cache proxy, cheap to
        restart) so the next run starts clean; the leftovers of a dead service go with it."""
        for name in targets.service_names:
            if self.services.pid_of(name) is None or name in ("cache-proxy",):
                self.services.stop(name)


class WorkerBusyError(RuntimeError):
    """Another worker already executes this lab's queue."""


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
        self.services = ServiceManager(engine=engine, logs_dir=settings.logs_dir, owner_pid=os.getpid())
        self._stop = threading.Event()

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
            while not self._stop.is_set():
                try:
                    ran = self.run_one()
                except Exception:  # noqa: BLE001 (the worker must outlive any one run)
                    log.exception("the worker hit an error between runs; going on")
                    ran = None
                if ran is None:
                    self._stop.wait(self.settings.worker_poll_interval_s)

    def stop(self) -> None:
        self._stop.set()
