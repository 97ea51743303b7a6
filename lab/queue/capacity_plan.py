"""The capacity search experiment: per backend, the largest load that meets an SLO.

A :class:`CapacityPlan` (backends, a base run spec, an SLO, a load dimension, bounds, a
budget) is checked at launch (:func:`check_plan`: one clear line for bad input), stored as
an experiment, then :func:`run_search` drives :func:`lab.analysis.capacity_search.search_capacity` per
backend: each probe queues ``repeats`` runs in the SAME experiment, waits for them (the
caller's ``wait``), evaluates them against the SLO from their stored per-request figures
and decides pass/fail with :func:`lab.analysis.capacity_search.conservative_pass`. After every probe the
search state is written on the experiment (``Experiment.capacity``) so pages show it live.
"""

from __future__ import annotations

import copy
import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus
from lab import backends
from lab.analysis import run_slo
from lab.analysis.capacity_search import (
    CapacityError,
    CapacityResult,
    ProbeResult,
    SearchBounds,
    conservative_pass,
    search_capacity,
)
from lab.analysis.slo import Slo, SloError, SloEvaluation, check_slo_applies, evaluate, parse_slo
from lab.analysis.statistics import mean_of_known
from lab.measurement import request_figures
from lab.measurement.request_figures import RequestFigures
from lab.members import os_user
from lab.queue.experiments import run_columns, with_round_random_seed
from lab.specs.schema import (
    PRESETS_DIR,
    ExperimentSpec,
    RunSpec,
    SpecError,
    format_validation_error,
    set_dotted_lenient,
)
from lab.user_input.base import StrictModel
from services.processes import start_detached


@dataclass(frozen=True)
class LoadDimension:
    """A load axis the search moves along, and how a load value becomes run settings."""

    name: str
    load_kind: str
    unit: str
    integer: bool
    resolution: float
    default_min: float
    default_max: float

    def apply(self, spec_data: dict[str, Any], load: float) -> None:
        spec_data.setdefault("load", {})["kind"] = self.load_kind
        if self.integer:
            spec_data["load"]["vus"] = int(load)
        else:
            spec_data["load"]["rate_per_s"] = float(load)
            # Enough VUs for the rate at latencies up to a minute, within the spec's cap.
            spec_data["load"]["max_vus"] = max(
                int(spec_data["load"].get("max_vus") or 1), min(1024, int(load * 60) + 1)
            )

    def label(self, load: float) -> str:
        return f"{int(load)} VUs" if self.integer else f"{load:g} req/s"


LOAD_DIMENSIONS: dict[str, LoadDimension] = {
    "vus": LoadDimension("vus", "constant-vus", "VUs", True, 1.0, 1, 64),
    "rate": LoadDimension("rate", "constant-arrival-rate", "req/s", False, 0.25, 0.25, 32),
}


class CapacityPlan(StrictModel):
    """What a capacity search measures; stored on its experiment."""

    name: str = Field(default="Capacity search", min_length=1, max_length=200)
    preset: str | None = None
    backends: list[str] = Field(min_length=1, max_length=20)
    base: RunSpec = Field(default_factory=RunSpec)
    slo: list[str] = Field(min_length=1)
    by: Literal["vus", "rate"] = "vus"
    min_load: float | None = None
    max_load: float | None = None
    max_probes: int = 8
    probe_s: float = Field(default=60, ge=1, le=6 * 3600)
    repeats: int = Field(default=1, ge=1, le=20)
    growth_factor: float = 2.0
    resolution: float | None = None
    scale: Literal["full", "quick"] = "full"

    @property
    def dimension(self) -> LoadDimension:
        return LOAD_DIMENSIONS[self.by]

    def parsed_slo(self) -> Slo:
        return parse_slo(self.slo)

    def bounds(self) -> SearchBounds:
        dimension = self.dimension
        return SearchBounds(
            min_load=dimension.default_min if self.min_load is None else self.min_load,
            max_load=dimension.default_max if self.max_load is None else self.max_load,
            max_probes=self.max_probes,
            growth_factor=self.growth_factor,
            resolution=self.resolution or dimension.resolution,
            integer=dimension.integer,
        )

    def probe_spec(self, backend: str, load: float) -> RunSpec:
        """The run spec of one probe: the base spec on ``backend`` at ``load`` for ``probe_s``."""
        data = copy.deepcopy(self.base.model_dump())
        data["backend"] = backend
        set_dotted_lenient(data, "load.duration_s", self.probe_s)
        # In-flight requests get at least the latency limit to finish: a probe too short to
        # see a request that meets the SLO must not count it as broken.
        latency_limits = [limit.threshold_s for limit in self.parsed_slo().limits if limit.figure == "latency"]
        graceful_s = float(data["load"].get("graceful_stop_s", 30))
        data["load"]["graceful_stop_s"] = max([graceful_s, *(math.ceil(t) for t in latency_limits)])
        self.dimension.apply(data, load)
        return RunSpec.model_validate(data)


def check_plan(plan: CapacityPlan) -> Slo:
    """Refuse a plan that cannot run, with one line saying why (raises CapacityError or SloError).

    Unknown backends, bounds that make the search impossible, an SLO on figures the runs
    will not have (TTFT/TPOT without ``workload.stream``), runs whose spec is invalid.
    """
    known = backends.spec_backend_names()
    for name in plan.backends:
        if name not in known:
            raise CapacityError(f"unknown backend {name!r}; backends: {', '.join(known)}")
    if len(set(plan.backends)) != len(plan.backends):
        raise CapacityError("a backend is given twice")
    slo = plan.parsed_slo()
    check_slo_applies(slo, streamed=plan.base.workload.stream)
    bounds = plan.bounds()
    for name in plan.backends:
        for load in {bounds.min_load, bounds.max_load}:
            try:
                plan.probe_spec(name, load)
            except ValidationError as error:
                raise CapacityError(
                    f"{name} at {plan.dimension.label(load)}: {format_validation_error(error)}"
                ) from None
    return slo


def decide_probe(slo: Slo, evaluations: list[SloEvaluation]) -> tuple[bool, float | None, str]:
    """Pass/fail of one load from its repeats: every limit (and the failure rate) must hold
    by :func:`conservative_pass` (the upper 95% CI bound with repeats, the value alone with one).
    Returns (passed, the first limit's deciding figure, why)."""
    notes: list[str] = []
    passed = bool(evaluations)
    deciding_first: float | None = None
    for index, limit in enumerate(slo.limits):
        values = [next((o.value_s for o in e.limits if o.limit == limit), None) for e in evaluations]
        ok, deciding = conservative_pass([v for v in values if v is not None], limit.threshold_s)
        if any(v is None for v in values):
            ok = False
        if index == 0:
            deciding_first = deciding
        passed = passed and ok
        shown = "unknown" if deciding is None else f"{deciding:.3g} s"
        notes.append(f"{limit.name} {shown} {'<=' if ok else '>'} {limit.threshold_s:g} s")
    if slo.max_failure_rate is not None:
        rates = [e.failure_rate for e in evaluations]
        ok, deciding = conservative_pass([r for r in rates if r is not None], slo.max_failure_rate)
        ok = ok and None not in rates
        passed = passed and ok
        notes.append(f"failure rate {'unknown' if deciding is None else f'{deciding:.1%}'}")
    return passed, deciding_first, "; ".join(notes)


class ProbeAborted(RuntimeError):
    """A probe's run did not finish (a backend that would not start, a cancel): the search stops."""


def _probe_state(probe: ProbeResult) -> dict[str, Any]:
    return {key: (list(value) if isinstance(value, tuple) else value) for key, value in asdict(probe).items()}


def initial_state(plan: CapacityPlan) -> dict[str, Any]:
    return {
        "plan": plan.model_dump(mode="json"),
        "unit": plan.dimension.unit,
        "slo_figure": plan.parsed_slo().limits[0].name if plan.parsed_slo().limits else None,
        "slo_threshold_s": plan.parsed_slo().limits[0].threshold_s if plan.parsed_slo().limits else None,
        "state": "queued",
        "backends": {name: {"state": "waiting", "probes": []} for name in plan.backends},
    }


def create_experiment(*, session: Session, plan: CapacityPlan, tags: str = "", launched_by: str | None = None) -> int:
    """Store the search as an experiment with no runs yet (probes are added as it decides,
    launched by ``launched_by``: by default the operating-system user, as for the CLI)."""
    check_plan(plan)
    spec = ExperimentSpec(
        name=plan.name,
        preset=plan.preset,
        description=f"capacity search under {plan.parsed_slo()}",
        base=plan.base,
        grid={"backend": list(plan.backends)},
        repeats=plan.repeats,
        scale="seed" if plan.scale == "full" else plan.scale,
    )
    experiment = store.enqueue_experiment(
        session=session,
        name=plan.name,
        preset=plan.preset,
        scale=plan.scale,
        spec=spec.model_dump(mode="json"),
        runs=[],
        tags=tags,
        launched_by=launched_by or os_user(),
    )
    store.set_experiment_capacity(engine=session.get_bind(), experiment_id=experiment.id, capacity=initial_state(plan))
    return experiment.id


def _result_state(result: CapacityResult) -> dict[str, Any]:
    capacity_probe = result.capacity_probe
    return {
        "state": "done",
        "capacity_load": result.capacity_load,
        "goodput_req_per_s": capacity_probe.goodput_req_per_s if capacity_probe else None,
        "stop_reason": result.stop_reason,
        "saturated": result.saturated,
        "lowest_failing_load": result.lowest_failing_load,
        "bounding_run_ids": [run_id for probe in result.bounding_probes for run_id in probe.run_ids],
        "probes": [_probe_state(p) for p in result.probes],
    }


def run_search(
    *,
    engine: Engine,
    experiment_id: int,
    plan: CapacityPlan,
    wait: Callable[[list[int]], None],
    tags: str = "",
    on_probe: Callable[[str, ProbeResult], None] | None = None,
) -> dict[str, Any]:
    """Search every backend of ``plan`` in turn; returns (and stores) the final state."""
    slo = check_plan(plan)
    with Session(engine) as session:
        experiment = store.get_experiment(session=session, experiment_id=experiment_id)
        state = copy.deepcopy(experiment.capacity) if experiment and experiment.capacity else initial_state(plan)
    state["state"] = "running"

    def save() -> None:
        store.set_experiment_capacity(engine=engine, experiment_id=experiment_id, capacity=copy.deepcopy(state))

    for backend in plan.backends:
        entry: dict[str, Any] = {"state": "searching", "probes": []}
        state["backends"][backend] = entry
        save()

        def probe(load: float, backend: str = backend, entry: dict[str, Any] = entry) -> ProbeResult:
            result = measure_probe(
                engine=engine,
                experiment_id=experiment_id,
                plan=plan,
                slo=slo,
                backend=backend,
                load=load,
                wait=wait,
                tags=tags,
            )
            entry["probes"].append(_probe_state(result))
            save()
            if on_probe:
                on_probe(backend, result)
            return result

        try:
            result = search_capacity(probe, plan.bounds())
        except ProbeAborted as error:
            entry.update(state="failed", capacity_load=None, stop_reason=str(error))
        except BaseException:
            # Stopped (Ctrl-C, a signal, a lost database): the stored state says so, never "running".
            entry.update(state="interrupted", stop_reason="the search was stopped")
            state["state"] = "interrupted"
            save()
            raise
        else:
            state["backends"][backend] = _result_state(result)
        save()
    state["state"] = "done"
    save()
    return state


def measure_probe(
    *,
    engine: Engine,
    experiment_id: int,
    plan: CapacityPlan,
    slo: Slo,
    backend: str,
    load: float,
    wait: Callable[[list[int]], None],
    tags: str = "",
) -> ProbeResult:
    """Queue ``plan.repeats`` runs of ``backend`` at ``load``, wait, evaluate, decide."""
    load = int(load) if plan.dimension.integer else float(load)
    spec = plan.probe_spec(backend, load)
    label = f"{backend} {plan.by}={load:g}"
    runs = []
    for repeat in range(plan.repeats):
        seeded = with_round_random_seed(spec, repeat)
        runs.append({"cell_label": label, "repeat_index": repeat, **run_columns(seeded)})
    with Session(engine) as session:
        run_ids = store.add_experiment_runs(session=session, experiment_id=experiment_id, runs=runs, tags=tags)
    wait(run_ids)
    evaluations: list[SloEvaluation] = []
    notes: list[str] = []
    throughputs: list[float | None] = []
    with Session(engine) as session:
        for run in store.list_runs(session=session, run_ids=run_ids, newest_first=False):
            reason = (run.status_reason or "").splitlines()[0] if run.status_reason else "no reason given"
            if run.status != RunStatus.DONE and (run.load_started_at is None or run.status == RunStatus.CANCELLED):
                # It never measured (a backend that would not start) or was stopped: no verdict on the load.
                raise ProbeAborted(f"probe run #{run.id} at {plan.dimension.label(load)} ended {run.status}: {reason}")
            try:
                evaluation = run_slo.evaluate_run(session=session, run_id=run.id, slo=slo)
            except request_figures.RequestFiguresMissing:
                # The load ran but no request finished in time (too slow for the probe): the SLO is broken.
                evaluation = evaluate(slo, RequestFigures(), duration_s=None)
            if run.status != RunStatus.DONE:
                notes.append(f"run #{run.id} {run.status}: {reason}")
            run_slo.save_evaluation(engine=engine, run_id=run.id, evaluation=evaluation)
            evaluations.append(evaluation)
            throughputs.append(run.req_per_s)
    passed, figure_s, note = decide_probe(slo, evaluations)
    passed = passed and not notes
    note = "; ".join([note, *notes]) if notes else note
    return ProbeResult(
        load=load,
        passed=passed,
        throughput=mean_of_known(throughputs),
        slo_figure_s=figure_s,
        goodput_req_per_s=mean_of_known([e.goodput_req_per_s for e in evaluations]),
        run_ids=tuple(run_ids),
        note=note,
    )


__all__ = [
    "LOAD_DIMENSIONS",
    "CapacityError",
    "CapacityPlan",
    "ProbeAborted",
    "SloError",
    "check_plan",
    "create_experiment",
    "decide_probe",
    "measure_probe",
    "run_search",
]


CAPACITY_PRESETS_DIR = PRESETS_DIR / "capacity"


def list_capacity_presets() -> list[str]:
    return sorted(path.stem for path in CAPACITY_PRESETS_DIR.glob("*.json"))


def load_capacity_preset(name: str, *, quick: bool = False) -> CapacityPlan:
    """A capacity preset (``lab/specs/presets/capacity/NAME.json``), at full or quick scale."""
    if name not in list_capacity_presets():
        raise SpecError(f"unknown capacity preset {name!r}; capacity presets: {', '.join(list_capacity_presets())}")
    raw = json.loads((CAPACITY_PRESETS_DIR / f"{name}.json").read_text())
    quick_section = raw.pop("quick", None) or {}
    raw.pop("description", None)
    data: dict[str, Any] = {**raw, "preset": name}
    if quick and quick_section:
        for key, value in quick_section.get("set", {}).items():
            set_dotted_lenient(data.setdefault("base", {}), key, value)
        for key in ("min_load", "max_load", "max_probes", "probe_s", "repeats"):
            if key in quick_section:
                data[key] = quick_section[key]
        data["scale"] = "quick"
    try:
        return CapacityPlan.model_validate(data)
    except ValidationError as error:
        raise SpecError(format_validation_error(error)) from error


def capacity_preset_note(name: str, *, quick: bool) -> tuple[str, str]:
    """(description, scale note) of a capacity preset, for pages and the report."""
    raw = json.loads((CAPACITY_PRESETS_DIR / f"{name}.json").read_text())
    return raw.get("description", ""), (raw.get("quick", {}).get("how", "") if quick else "")


def start_search_in_background(experiment_id: int) -> int:
    """Run a stored search detached (``python -m lab capacity --experiment ID``); returns its pid.

    It queues the probes one by one; the lab's worker executes them (or it does, if none runs)."""
    return start_detached([sys.executable, "-m", "lab", "capacity", "--experiment", str(experiment_id)])


def stored_plan(*, session: Session, experiment_id: int) -> CapacityPlan:
    experiment = store.get_experiment(session=session, experiment_id=experiment_id)
    if experiment is None or not experiment.capacity:
        raise LookupError(f"experiment {experiment_id} is not a capacity search")
    return CapacityPlan.model_validate(experiment.capacity["plan"])


def capacity_state(*, session: Session, experiment_id: int) -> dict[str, Any] | None:
    """The search state stored on experiment ``experiment_id`` (None: not a capacity search)."""
    experiment = store.get_experiment(session=session, experiment_id=experiment_id)
    return dict(experiment.capacity) if experiment is not None and experiment.capacity else None


# A search set up by hand (the Find capacity form, ``python -m lab capacity``), per scale:
# the quick one fits a 2-core box in minutes.
CAPACITY_DEFAULTS: dict[str, dict[str, float]] = {
    "full": {"max_probes": 8, "probe_s": 60.0, "max_vus": 64, "max_rate": 32.0},
    "quick": {"max_probes": 6, "probe_s": 20.0, "max_vus": 16, "max_rate": 8.0},
}


def default_max_load(by: str, *, quick: bool) -> float:
    """The largest load a hand-made search probes unless told otherwise."""
    defaults = CAPACITY_DEFAULTS["quick" if quick else "full"]
    return defaults["max_vus"] if by == "vus" else defaults["max_rate"]


def capacity_plan(
    *,
    backends: list[str],
    slo: list[str],
    by: Literal["vus", "rate"] = "vus",
    quick: bool = False,
    min_load: float | None = None,
    max_load: float | None = None,
    max_probes: int | None = None,
    probe_s: float | None = None,
    repeats: int = 1,
    target_url: str | None = None,
    settings: list[tuple[str, Any]] | None = None,
    name: str | None = None,
    preset: str | None = None,
) -> CapacityPlan:
    """A search set up by hand: the spec's default run (the seed's number story), a shorter
    graceful stop at the quick scale, ``settings`` (``(dotted key, value)``) applied, and the
    scale's defaults for every bound not given. Raises ValidationError or SpecError."""
    scale: Literal["full", "quick"] = "quick" if quick else "full"
    defaults = CAPACITY_DEFAULTS[scale]
    base: dict[str, Any] = {"load": {"graceful_stop_s": 15}} if quick else {}
    if target_url:
        base["target_url"] = target_url
    for key, value in settings or []:
        set_dotted_lenient(base, key, value)
    return CapacityPlan(
        name=name or f"Capacity: {', '.join(backends)} under {', '.join(slo)}",
        backends=backends,
        base=RunSpec.model_validate({**base, "backend": backends[0]}),
        slo=slo,
        by=by,
        min_load=min_load,
        max_load=max_load if max_load is not None else default_max_load(by, quick=quick),
        max_probes=max_probes if max_probes is not None else int(defaults["max_probes"]),
        probe_s=probe_s or defaults["probe_s"],
        repeats=repeats,
        scale=scale,
        preset=preset,
    )
