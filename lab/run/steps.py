"""The steps of one run, one method each, in the order the pages show them: read the spec,
start the services, prepare the workload, warm up, fill the cache, load (then drain).

Each step does its I/O (services, HTTP, k6, the database) and leaves the decisions to
``decisions``; collecting the figures is ``collect.RunCollector``'s. ``runner.RunExecutor`` calls
the steps in order and turns what they raise into the run's final state.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
from pydantic import ValidationError
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus, utc_now
from lab.backends import Backend, get_backend, managed_backend_names
from lab.measurement import environment, live, server_metrics
from lab.measurement.machine_record import MachineRecord, read_cpu_features
from lab.measurement.reference_kernel import reference_kernel_gflops
from lab.measurement.resources import ResourceSampler
from lab.run import decisions
from lab.run.decisions import RunCancelled, RunFailed
from lab.run.k6_driver import K6Process, describe_exit_code, k6_environment, k6_version, script_path
from lab.run.service_watch import ServiceWatch, wait_watching
from lab.settings import Settings
from lab.specs.schema import RunSpec, format_validation_error
from lab.workloads import WorkloadError, get_workload
from services.catalog import ServiceKind, cache_proxy_config, redis_config
from services.manager import ServiceManager

log = logging.getLogger(__name__)
# The phase a starting run is in while its workload writes its requests (pages.view.tables reads it).
PREPARING_PHASE = "preparing"

T = TypeVar("T")

# How long k6 is given to write its summary after a SIGINT (a cancel or a dead service).
K6_CANCEL_GRACE_S = 20.0
# How long the unmeasured cache fill's k6 is given to stop.
FILL_CANCEL_GRACE_S = 30.0
# The warm-up's requests ask for at most this many tokens: they only load the model.
WARMUP_MAX_TOKENS = 16
# The trace a +cache run's proxy records (cache.record_trace), in the run's folder.
RECORDED_TRACE_FILE = "recorded-trace.jsonl"
WARMUP_TIMEOUT_S = 600.0
CACHE_FLUSH_TIMEOUT_S = 30.0
# The backend's /metrics may be slow under load: a sample is skipped rather than waited for.
GAUGE_SCRAPE_TIMEOUT_S = 2.0
LOAD_POLL_INTERVAL_S = 1.0


@dataclass
class RunTargets:
    """Where the load goes and which services back it."""

    target_url: str
    backend_url: str
    backend_service: str | None  # managed service name, None for external
    proxy_url: str | None = None
    service_names: list[str] = field(default_factory=list)


class RunSteps:
    """The steps of one claimed run, and what they learn on the way (the services' resolved
    configuration, services lost, the backend's samples) for the run's record and figures."""

    # The claim's token (set by the executor): every write carries it, refused (RunFenced) once the
    # run was taken from this worker (declared lost); the cancel check, once a second, notices it too.
    fencing_token: int | None = None

    def __init__(self, *, engine: Engine, settings: Settings, services: ServiceManager, run_id: int) -> None:
        self.engine = engine
        self.settings = settings
        self.services = services
        self.run_id = run_id
        self.run_dir = settings.runs_dir / str(run_id)
        self.k6: K6Process | None = None
        # The resolved configuration of each service this run used (e.g. vLLM's dtype "best" -> bfloat16).
        self.service_configs: dict[str, dict[str, Any]] = {}
        self.lost_services: list[str] = []  # fail-open services that died during the run
        # The run's managed services, watched in every phase that waits on them (set once they are up).
        self.watch: ServiceWatch | None = None
        # Writes that only show progress (and cancel checks): skipped while the database is
        # unreachable, so an outage never stops the load; the problem is logged once per outage.
        self._live_write_problem: str | None = None
        # Server-side gauges and counters sampled once a second during the load (running and
        # waiting requests; output tokens and completed requests so far, for the steady rates).
        self.server_samples: list[dict[str, float | None]] = []

    # -- the run's record -------------------------------------------------------------------
    def set_status(self, status: str, **values: Any) -> None:
        fence = self.fencing_token
        store.set_run_status(engine=self.engine, run_id=self.run_id, status=status, fencing_token=fence, **values)

    def update(self, **values: Any) -> None:
        """Write the run's columns, fenced by the claim's token (as ``set_status``)."""
        store.update_run(engine=self.engine, run_id=self.run_id, fencing_token=self.fencing_token, **values)

    def cancel_requested(self) -> bool:
        """Whether the user asked to cancel; False while the database cannot be read (seen once it returns)."""
        cancelled = self.live_write(
            lambda: store.is_cancel_requested(engine=self.engine, run_id=self.run_id, fencing_token=self.fencing_token)
        )
        return bool(cancelled)

    def live_write(self, write: Callable[[], T]) -> T | None:
        """Do a write (or read) that only shows progress; a database error is logged once per
        outage and skipped (None), never raised: the run goes on and its final write retries."""
        try:
            result = write()
        except SQLAlchemyError as error:
            problem = decisions.write_failure_message(error) or str(error)
            if self._live_write_problem is None:
                log.warning("run %s: live progress not written (%s); the run goes on", self.run_id, problem)
            self._live_write_problem = problem
            return None
        if self._live_write_problem is not None:
            log.warning("run %s: the database answers again; live progress resumes", self.run_id)
            self._live_write_problem = None
        return result

    def watch_phase(self, phase: str) -> None:
        """Once a second in a waiting phase: raise on a cancel or a dead service the run needs."""
        self.check_cancel()
        if self.watch is not None:
            self.watch.check(phase)

    def check_cancel(self) -> None:
        """Raise RunCancelled when the user asked to cancel the run."""
        if self.cancel_requested():
            raise RunCancelled()

    # -- start ------------------------------------------------------------------------------
    def load_spec(self) -> RunSpec:
        """The run's spec, validated again now: a model folder or an allowed host may have gone since."""
        with Session(self.engine) as session:
            run = store.get_run(session=session, run_id=self.run_id)
            if run is None:
                raise RunFailed(f"run {self.run_id} was deleted before it started")
            try:
                return RunSpec.model_validate(run.spec)
            except ValidationError as error:
                raise RunFailed(f"the run's spec is no longer valid: {format_validation_error(error)}") from error

    def start_services(self, spec: RunSpec) -> RunTargets:
        """An empty run folder, the environment recorded, then the services up (with how long
        starting them took: what the next run of this configuration is told to expect)."""
        # A run id can be reused after deletions (SQLite): never read another run's files.
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        run_environment = environment.capture(model=spec.model, k6_version=k6_version())
        self.update(environment=run_environment)
        backend_pid_before = self.services.pid_of(spec.base_backend)
        startup_began = time.monotonic()
        targets = self.bring_up_services(spec)
        self.watch = ServiceWatch(
            services=self.services, names=targets.service_names, run_id=self.run_id, lost=self.lost_services
        )
        self.watch.check("start-up")  # the backend may have died while the cache's services started
        startup = {
            "seconds": round(time.monotonic() - startup_began, 1),
            "fresh": self.services.pid_of(spec.base_backend) not in (None, backend_pid_before),
        }
        self.update(
            environment={**run_environment, "services": self.service_configs, "startup": startup},
            **self.machine_record(spec).columns(),
        )
        return targets

    def machine_record(self, spec: RunSpec) -> MachineRecord:
        """The CPU the backend chose its settings by, a fixed-kernel speed, and the settings its
        launch resolved to (read back from the launch, so "best" is what it became)."""
        launch = self.service_configs.get(spec.base_backend) or {}
        settings = get_backend(spec.base_backend).resolved_settings(
            [str(arg) for arg in launch.get("argv") or []], dict(launch.get("env") or {})
        )
        return MachineRecord.capture(
            features=read_cpu_features(), reference_kernel_gflops=reference_kernel_gflops(), backend_settings=settings
        )

    def backends_still_needed(self) -> set[str]:
        """The backends that queued runs of this run's interleaved experiment still use, when
        enough memory is free to keep them started side by side; empty otherwise."""
        free_gib = psutil.virtual_memory().available / 2**30
        if free_gib < self.settings.keep_experiment_backends_min_free_gib:
            return set()
        with Session(self.engine) as session:
            run = store.get_run(session=session, run_id=self.run_id)
            experiment = run.experiment if run is not None else None
            spec = (experiment.spec or {}) if experiment is not None else {}
            if experiment is None or spec.get("order") != "interleaved" or (spec.get("repeats") or 1) < 2:
                return set()
            needed = set()
            for other in experiment.runs:
                if other.status == RunStatus.QUEUED:
                    try:
                        needed.add(RunSpec.model_validate(other.spec).base_backend)
                    except ValidationError:  # fails on its own when claimed
                        continue
        return needed

    def bring_up_services(self, spec: RunSpec) -> RunTargets:
        """Start (or reuse) what the spec needs; stop the inference backend it does not use."""
        base, backend = spec.base_backend, spec.backend_kind
        if not backend.managed:
            backend_url, backend_service = str(spec.target_url).rstrip("/"), None
        else:
            # One accelerator (or two CPU cores): by default never measure with another backend loaded.
            # Stopped only here, when this run needs another one: the backend a run leaves stays
            # warm for the next cell with its configuration (the queue is grouped by backend).
            # Interleaved rounds switch backends every few runs: those the experiment still needs
            # stay started, idle, while memory allows (the run's contention figure shows any cost).
            if self.settings.stop_idle_backends:
                kept = self.backends_still_needed()
                for other in managed_backend_names():
                    if other != base and other not in kept:
                        self.services.stop(other)
            self.check_cancel()
            config = backend.service_config(model=spec.model, options=spec.backend_options(), settings=self.settings)
            backend_url, backend_service = self.services.ensure(base, config, abort=self.cancel_requested), base
            self.service_configs[base] = config.params
        targets = RunTargets(target_url=backend_url, backend_url=backend_url, backend_service=backend_service)
        if backend_service:
            targets.service_names.append(backend_service)
        if spec.uses_cache:
            self.check_cancel()
            self._bring_up_cache(spec, targets)
        return targets

    def _bring_up_cache(self, spec: RunSpec, targets: RunTargets) -> None:
        """Redis and the response cache in front of the backend; the load goes to the cache."""
        redis_url = self.services.ensure(ServiceKind.REDIS, redis_config(), abort=self.cancel_requested)
        proxy_url = self.services.ensure(
            ServiceKind.CACHE_PROXY,
            cache_proxy_config(
                upstream_url=targets.backend_url,
                redis_url=redis_url,
                policy=spec.cache.policy,
                ttl_s=spec.cache.ttl_s,
                single_flight=spec.cache.single_flight,
                server=spec.cache.server,
                **spec.cache.tier_settings(),
                **self._recording(spec),
            ),
            abort=self.cancel_requested,
        )
        targets.target_url, targets.proxy_url = proxy_url, proxy_url
        targets.service_names += [ServiceKind.REDIS, ServiceKind.CACHE_PROXY]
        self.service_configs[ServiceKind.CACHE_PROXY] = {
            "policy": spec.cache.policy,
            "ttl_s": spec.cache.ttl_s,
            "single_flight": spec.cache.single_flight,
            "server": spec.cache.server,
            **spec.cache.tier_settings(),
        }

    def _recording(self, spec: RunSpec) -> dict[str, Any]:
        """The proxy's trace recording settings for this run (none unless ``cache.record_trace``):
        into the run's folder, with the model's tokenizer, in the trace workload's blocks."""
        if not spec.cache.record_trace:
            return {}
        model = Path(spec.model)
        return {
            "record_trace": str(self.run_dir / RECORDED_TRACE_FILE),
            "record_tokenizer": str(model) if (model / "tokenizer_config.json").is_file() else None,
            "record_block_tokens": get_workload(spec.workload.kind).block_tokens(spec),
        }

    def prepare_workload(self, spec: RunSpec) -> Path | None:
        """Write the request file the workload's k6 script replays (None if it needs none); the run
        says so meanwhile (a trace's prompts can take seconds to build)."""
        self.live_write(lambda: self.update(progress={"phase": PREPARING_PHASE}))
        try:
            return get_workload(spec.workload.kind).prepare(spec, self.run_dir, spec.backend_kind)
        except WorkloadError as error:
            raise RunFailed(str(error)) from error

    # -- warm up ----------------------------------------------------------------------------
    def warm_up(self, spec: RunSpec, targets: RunTargets, requests_file: Path | None) -> None:
        """Send the workload's own first requests straight to the backend (never through the cache)."""
        model = spec.served_model_name or spec.model
        for messages in get_workload(spec.workload.kind).warmup_messages(spec, requests_file):
            self.check_cancel()
            body = {"model": model, "messages": messages, "max_tokens": min(spec.max_tokens, WARMUP_MAX_TOKENS)}
            try:
                # Watched while it waits: a backend that dies mid-request ends the run at once.
                response = wait_watching(
                    lambda: httpx.post(
                        f"{targets.backend_url}/v1/chat/completions",
                        json=body,  # noqa: B023 - called within this iteration
                        timeout=WARMUP_TIMEOUT_S,
                    ),
                    every_second=lambda: self.watch_phase("warm-up"),
                )
            except httpx.HTTPError as error:
                raise RunFailed(f"warm-up request failed: {error}") from error
            if response.status_code != 200:
                raise RunFailed(f"warm-up request failed: HTTP {response.status_code}: {response.text[:500]}")

    def reset_caches(self, spec: RunSpec, targets: RunTargets) -> None:
        """Empty the response cache and the backend's own caches so the run starts cold."""
        if spec.keep_caches_warm:
            return
        if targets.proxy_url:
            try:
                response = httpx.post(f"{targets.proxy_url}/cache/flush", timeout=CACHE_FLUSH_TIMEOUT_S)
            except httpx.HTTPError as error:
                self.watch_phase("cache reset")  # a dead proxy says more than the connection error
                raise RunFailed(f"could not flush the response cache: {error}") from error
            if response.status_code >= 400:
                raise RunFailed(f"could not flush the response cache: HTTP {response.status_code}")
        if targets.backend_service:
            warning = spec.backend_kind.reset_caches(targets.backend_url)
            if warning:
                log.warning("run %s: %s", self.run_id, warning)

    # -- fill -------------------------------------------------------------------------------
    def fill_cache(self, spec: RunSpec, targets: RunTargets, requests_file: Path | None) -> None:
        """Run the workload unmeasured through the cache until it has stored every distinct
        request (``cache.fill_first_up_to``), so the measured load sees the hit path's steady state."""
        wanted = get_workload(spec.workload.kind).distinct_requests(spec) or 0
        env = k6_environment(spec, target_url=targets.target_url, requests_file=requests_file)
        # The same requests from the same VUs, for as long as filling may take.
        env.update(LOAD_KIND="constant-vus", VUS=str(spec.load.peak_vus), DURATION=f"{spec.cache.fill_timeout_s:g}s")
        fill_dir = self.run_dir / "fill"
        k6 = K6Process(
            script=script_path(spec.workload.kind),
            env=env,
            summary_path=fill_dir / "summary.json",
            ndjson_path=fill_dir / "k6.ndjson",
            log_path=fill_dir / "k6.log",
        )
        began = time.monotonic()
        stored_before = self._cache_stores(targets)
        k6.start()
        try:
            stored = self._follow_fill(k6, targets, wanted=wanted, stored_before=stored_before)
        finally:
            if k6.is_running():
                k6.cancel(grace_s=FILL_CANCEL_GRACE_S)
            shutil.rmtree(fill_dir, ignore_errors=True)  # unmeasured: nothing of it is kept
        if stored < wanted:
            raise RunFailed(
                f"the response cache stored {stored:.0f} of {wanted} distinct requests in "
                f"{time.monotonic() - began:.0f} s (cache.fill_timeout_s {spec.cache.fill_timeout_s:g})"
            )
        log.info(
            "run %s: cache filled with %d distinct requests in %.0f s", self.run_id, wanted, time.monotonic() - began
        )

    def _follow_fill(self, k6: K6Process, targets: RunTargets, *, wanted: int, stored_before: float) -> float:
        """Once a second while the fill's k6 runs: a cancel, a dead service, requests that all
        fail (an upstream gone, managed or not); returns how many answers the cache stored."""
        tail = k6.live_tail()
        stored, last_stored_at, failed_at_store = 0.0, time.monotonic(), 0
        while k6.is_running() and stored < wanted:
            time.sleep(LOAD_POLL_INTERVAL_S)
            self.watch_phase("cache fill")
            tail.read_new()
            if (now_stored := self._cache_stores(targets) - stored_before) > stored:
                stored, last_stored_at, failed_at_store = now_stored, time.monotonic(), tail.requests_failed_total
            stalled_s, failed = time.monotonic() - last_stored_at, tail.requests_failed_total - failed_at_store
            if decisions.fill_failing(seconds_since_stored=stalled_s, failed_since_stored=failed):
                common = decisions.most_common_error_answer(k6.error_answers())
                quoted = f"; the most common error answer: {common[0]}" if common else ""
                raise RunFailed(
                    f"the cache fill stopped: {failed} requests to {targets.backend_url} (through the "
                    f"response cache) failed and no answer was stored in {stalled_s:.0f} s{quoted}"
                )
        return stored

    @staticmethod
    def _cache_stores(targets: RunTargets) -> float:
        """The proxy's count of answers stored so far."""
        snapshot = server_metrics.scrape(targets.proxy_url or "") or {}
        return float(snapshot.get("lab_cache_stores_total") or 0.0)

    # -- load, then drain -------------------------------------------------------------------
    def drive_load(
        self, spec: RunSpec, targets: RunTargets, requests_file: Path | None
    ) -> tuple[int, list[dict[str, Any]]]:
        """Run k6 to the end of its load and its drain (or until cancelled or a service dies);
        returns (exit code, resource samples)."""
        self.k6 = K6Process(
            script=script_path(spec.workload.kind),
            env=k6_environment(spec, target_url=targets.target_url, requests_file=requests_file),
            summary_path=self.run_dir / "summary.json",
            ndjson_path=self.run_dir / "k6.ndjson",
            log_path=self.run_dir / "k6.log",
            keep_raw=self.settings.keep_raw,
        )
        # Looked up once (with the watch's): the load loop checks these processes, not the database.
        pids = {name: identity[0] for name, identity in self.watch.watched.items() if identity} if self.watch else {}
        sampler = ResourceSampler(lambda: {**pids, **({"k6": self.k6.pid} if self.k6 and self.k6.pid else {})})
        self.k6.start()
        sampler.start()
        self.live_write(lambda: self.set_status(RunStatus.RUNNING, load_started_at=utc_now()))
        try:
            ended_early = self._follow_load(spec, targets, sampler)
            exit_code = self.k6.wait()
        finally:
            samples = sampler.stop()
        if ended_early is not None:
            raise ended_early
        return exit_code, samples

    def _follow_load(
        self, spec: RunSpec, targets: RunTargets, sampler: ResourceSampler
    ) -> RunCancelled | RunFailed | None:
        """Once a second while k6 runs: its progress to the run (skipped while the database is
        unreachable), the backend's gauges, a cancel or a dead service (k6 is then stopped).
        Returns what ended the load early, if anything."""
        assert self.k6 is not None
        started = time.monotonic()
        load_started_epoch_s = time.time()
        # k6's samples as read from its pipe so far: the live charts and counts of workload
        # requests only (k6's API counts its setup health check too).
        tail = self.k6.live_tail()
        planned_vus = spec.load.peak_vus if spec.load.kind == "constant-vus" else None
        while self.k6.is_running():
            progress = self.k6.progress()
            elapsed_s = time.monotonic() - started
            tail.read_new()
            progress_now = decisions.load_progress(
                elapsed_s=elapsed_s,
                planned_s=spec.load.planned_duration_s,
                graceful_stop_s=spec.load.graceful_stop_s,
                # k6's own count where its API answers; a constant-VU load runs its planned VUs throughout.
                vus=progress.vus if progress.vus is not None else planned_vus,
                output_tokens=progress.output_tokens,
                requests_ok=tail.requests_ok_total,
                requests_failed=tail.requests_failed_total,
                live=live.live_progress(
                    tail,
                    origin_epoch_s=load_started_epoch_s,
                    resource_samples=sampler.samples,
                    server_samples=self.server_samples,
                ),
            )
            self.live_write(lambda: self.update(progress=progress_now))  # noqa: B023 - called within this iteration
            self.sample_server_gauges(spec.backend_kind, targets)
            ended_early: RunCancelled | RunFailed | None
            if self.cancel_requested():
                ended_early = RunCancelled()
            else:
                phase = decisions.load_phase(elapsed_s=elapsed_s, planned_s=spec.load.planned_duration_s)
                ended_early = self.watch.failure(phase) if self.watch is not None else None
            if ended_early is not None:
                self.k6.cancel(grace_s=K6_CANCEL_GRACE_S)
                return ended_early
            time.sleep(LOAD_POLL_INTERVAL_S)
        return None

    def sample_server_gauges(self, backend: Backend, targets: RunTargets) -> None:
        """Requests running and waiting in the backend now, and its token and request counters
        (those it exports)."""
        snapshot = server_metrics.scrape(
            targets.backend_url, prefixes=backend.metrics.prefixes, timeout_s=GAUGE_SCRAPE_TIMEOUT_S
        )
        if snapshot is None:
            return
        self.server_samples.append(
            {
                "t": time.time(),
                **server_metrics.gauges(snapshot, backend.metrics),
                **server_metrics.counters(snapshot, backend.metrics),
            }
        )

    def check_load(self, exit_code: int) -> None:
        """Raise RunFailed when k6 failed or wrote no summary (its figures cannot be used)."""
        exit_message = self.k6.exit_message() if self.k6 is not None else describe_exit_code(exit_code)
        failure = decisions.load_failure(
            exit_code=exit_code, summary_written=(self.run_dir / "summary.json").is_file(), exit_message=exit_message
        )
        if failure:
            raise RunFailed(failure)

    def stop_k6(self) -> None:
        """Stop the load if it still runs; SIGINT first: k6 still writes its summary, which
        the partial figures come from."""
        if self.k6 is not None and self.k6.is_running():
            self.k6.cancel(grace_s=5)
