"""The run executor: one claimed run from its spec to a final state, step by step.

``execute`` reads like the phases the pages show: start the services, warm up, fill the
cache, load (then drain), collect, store. The steps are ``steps.RunSteps``'s, the
figures ``collect.RunCollector``'s, the decisions ``decisions``' and the final write
``final_state.FinalStateWriter``'s. ``worker.Worker`` claims the runs and calls this.
Nothing here imports Streamlit: pages only read what is written to the database.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Engine

from db.models import RunStatus
from db.store import RunFenced
from lab.measurement.machine_speed import calibration_s
from lab.measurement.results import MachineSpeedFigures
from lab.run import decisions
from lab.run.collect import CollectedRun, RunCollector, Snapshots
from lab.run.decisions import RunCancelled
from lab.run.final_state import FinalStateWriter, PendingFinalStates
from lab.run.steps import RunSteps, RunTargets
from lab.settings import Settings
from lab.specs.schema import RunSpec
from services.catalog import ServiceKind
from services.manager import ServiceManager
from services.supervisor import ServiceStartAborted

log = logging.getLogger(__name__)

# Services stopped after any failure even when alive: cheap to restart, and a clean start
# rules them out as the next run's problem.
ALWAYS_RESTARTED_SERVICES = (ServiceKind.CACHE_PROXY,)


class SettingsRefused(Exception):
    """The backend resolved settings its experiment does not accept (another dtype than its
    first run's): the run ends ``interrupted`` with this reason, before any load."""


# Called once the services are up and the run's machine record is stored; returns why the run
# must not go on (its experiment refuses the settings the backend resolved), or None.
SettingsCheck = Callable[[int], "str | None"]


@dataclass
class RunSoFar:
    """How far a run got: what its partial figures need when it ends early."""

    spec: RunSpec | None = None
    targets: RunTargets | None = None
    before: Snapshots = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    loaded: bool = False  # k6 was started: its files may hold figures
    # The fixed CPU kernel's seconds just before and just after the load: the machine's speed.
    calibration: MachineSpeedFigures = field(default_factory=MachineSpeedFigures)


class RunExecutor:
    """Executes one claimed run."""

    def __init__(
        self,
        *,
        engine: Engine,
        settings: Settings,
        services: ServiceManager,
        run_id: int,
        pending_final_states: PendingFinalStates,
        check_settings: SettingsCheck | None = None,
        fencing_token: int | None = None,
    ) -> None:
        self.engine = engine
        self.run_id = run_id
        self.check_settings = check_settings
        self.steps = RunSteps(engine=engine, settings=settings, services=services, run_id=run_id)
        self.steps.fencing_token = fencing_token
        self.calibration_repetitions = settings.machine_calibration_repetitions
        self.collector = RunCollector(
            engine=engine,
            services=services,
            run_id=run_id,
            run_dir=self.steps.run_dir,
            contention_threshold_percent=settings.contention_warning_cpu_percent,
            database_retry_s=settings.final_write_retry_s,
            k6_process=lambda: self.steps.k6,
        )
        self.final_state = FinalStateWriter(
            engine=engine,
            run_id=run_id,
            run_dir=self.steps.run_dir,
            pending=pending_final_states,
            retry_s=settings.final_write_retry_s,
            fencing_token=fencing_token,
        )

    def execute(self) -> str:
        """Take the run from starting to a final state; returns that state."""
        run = RunSoFar()
        steps = self.steps
        try:
            spec = run.spec = steps.load_spec()
            targets = run.targets = steps.start_services(spec)
            if self.check_settings is not None and (refused := self.check_settings(self.run_id)):
                raise SettingsRefused(refused)
            steps.check_cancel()
            requests_file = steps.prepare_workload(spec)
            steps.set_status(RunStatus.WARMING)
            steps.warm_up(spec, targets, requests_file)
            steps.reset_caches(spec, targets)
            steps.check_cancel()
            if spec.fills_cache_first:
                steps.fill_cache(spec, targets, requests_file)
            run.calibration = MachineSpeedFigures(
                machine_calibration_before_s=calibration_s(self.calibration_repetitions)
            )
            run.before = self.collector.scrape_all(spec, targets)
            run.loaded = True
            exit_code, run.samples = steps.drive_load(spec, targets, requests_file)
            after_s = calibration_s(self.calibration_repetitions)
            run.calibration = replace(run.calibration, machine_calibration_after_s=after_s)
            # A progress write: skipped while the database is unreachable (the final write retries).
            steps.live_write(lambda: steps.set_status(RunStatus.PARSING))
            steps.check_load(exit_code)
            collected = self.collector.collect(spec, targets, run.before, run.samples, steps.server_samples)
            return self._store(collected.with_parts(run.calibration))
        except (RunCancelled, ServiceStartAborted):
            self.final_state.write(
                RunStatus.CANCELLED,
                reason="cancelled by the user",
                **self._partial_columns(run),
                parts=self.collector.unsaved_parts,
            )
            return RunStatus.CANCELLED
        except SettingsRefused as refused:
            log.warning("run %s interrupted: %s", self.run_id, refused)
            self.final_state.write(RunStatus.INTERRUPTED, reason=str(refused), parts=self.collector.unsaved_parts)
            return RunStatus.INTERRUPTED
        except Exception as error:
            return self._fail(run, error)
        except BaseException:
            # Ctrl-C or a stop signal: leave the run in a final state, never stuck "running",
            # with what k6 had written by then.
            try:
                columns = self._partial_columns(run)
            except BaseException:
                columns = {}
            self.final_state.write(
                RunStatus.INTERRUPTED,
                reason="the lab was stopped during this run",
                **columns,
                parts=self.collector.unsaved_parts,
            )
            raise
        finally:
            steps.stop_k6()

    def _store(self, collected: CollectedRun) -> str:
        """The run's figures with its warnings, in its final state (done, or failed without a success)."""
        warnings = decisions.run_warnings(
            collected.results,
            lost_services=self.steps.lost_services,
            cache_errors=self.collector.cache_errors,
            disk_note=self._run_folder_full(),
            metrics_problems=self.collector.metrics_problems,
        )
        results = replace(collected.results, measurement_warnings=warnings)
        error_answers = self.collector.error_answers() if not results.requests_ok else {}
        status, reason = decisions.final_state(results, error_answers=error_answers)
        if reason:
            log.warning("run %s failed: %s", self.run_id, reason)
        columns = replace(collected, results=results).as_columns()
        self.final_state.write(status, reason=reason, parts=self.collector.unsaved_parts, **columns)
        return status

    def _fail(self, run: RunSoFar, error: Exception) -> str:
        """End the run failed with ``error``'s reason and what it measured so far (nothing when the
        run was taken from this worker: declared lost while it ran, it is another's decision now)."""
        if isinstance(error, RunFenced):
            log.warning("%s: this worker stops its load and writes nothing more", error)
            return RunStatus.INTERRUPTED
        failure = decisions.failure_reason(error, disk_note=self._run_folder_full())
        if failure.expected:
            # Expected failures (a full disk, a dead backend) are one line, not a traceback.
            log.error("run %s failed: %s", self.run_id, failure.log_line)
        else:
            log.exception("run %s failed", self.run_id)
        self.final_state.write(
            RunStatus.FAILED, reason=failure.reason, **self._partial_columns(run), parts=self.collector.unsaved_parts
        )
        if run.targets is not None:
            self._stop_dead_services(run.targets)
        return RunStatus.FAILED

    def _partial_columns(self, run: RunSoFar) -> dict[str, Any]:
        """Whatever k6 wrote before a failure, cancel or stop (nothing before the load)."""
        if not run.loaded or run.targets is None or run.spec is None:
            return {}
        self.steps.stop_k6()
        partial = self.collector.partial_columns(
            run.spec, run.targets, run.before, run.samples, self.steps.server_samples
        )
        return {**partial, **run.calibration.figures()} if partial else partial

    def _run_folder_full(self) -> str | None:
        """A sentence when the disk holding the run folder is (nearly) full, else None."""
        try:
            stats = os.statvfs(self.steps.run_dir)
        except OSError:
            return None
        return decisions.run_folder_full_note(stats.f_bavail * stats.f_frsize)

    def _stop_dead_services(self, targets: RunTargets) -> None:
        """After a failure, stop the services whose process died (and those cheap to restart)
        so the next run starts clean; the leftovers of a dead service go with it."""
        services = self.steps.services
        for name in targets.service_names:
            try:
                if services.pid_of(name) is None or name in ALWAYS_RESTARTED_SERVICES:
                    services.stop(name)
            except Exception as error:
                log.error(
                    "run %s: could not stop %s: %s",
                    self.run_id,
                    name,
                    decisions.write_failure_message(error) or f"{type(error).__name__}: {error}",
                )
