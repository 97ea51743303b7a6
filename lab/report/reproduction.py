"""The whole reproduction: queue the seed's three experiments (their verdict rules frozen),
run them, read them back from the store and write the report (:func:`.build.write_report`).

``reproduce`` queues the seed presets, runs them (through :func:`lab.queue.run_waiter.wait_for_runs`)
and writes the report from what they measured; ``report_only`` writes it again from the newest
stored reproduction.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.analysis.measurability import DEFAULT_MAX_CELL_S
from lab.report.build import PRESETS, overhead_sentence, write_report
from lab.report.capacity_section import latest_capacity_section
from lab.report.publish import published_record

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from lab.specs.schema import ExperimentSpec


def _meta_from_spec(spec: Any, experiment_id: int, frozen_rules: dict[str, Any] | None = None) -> dict[str, Any]:
    vus = spec.grid.get("load.vus") or [spec.base.load.peak_vus]
    return {
        "name": spec.name,
        "scale": spec.scale,
        "scale_note": spec.scale_note,
        "ids": [experiment_id],
        "duration_s": spec.base.load.duration_s,
        "vus": list(vus),
        "repeats": spec.repeats,
        "order": spec.order if spec.repeats > 1 else "blocks",
        "order_seed": spec.order_seed,
        "until_decided": spec.until_decided.model_dump() if spec.until_decided else None,
        "cell_scales": {label: cell.model_dump() for label, cell in spec.cell_scales.items()},
        "rules_version": (frozen_rules or {}).get("version"),
        "allowed_dirty": bool((frozen_rules or {}).get("allowed_dirty")),
    }


def scaled_preset(
    session: Session, preset: str, *, scale: str, repeats: int | None, max_cell_s: float
) -> ExperimentSpec:
    """The seed preset's experiment spec at ``scale``: the adapted scale lengthens cells from the
    history stored in ``session``."""
    from lab.queue.rounds import adapted_spec
    from lab.specs.schema import load_preset

    spec = load_preset(preset, quick=scale == "quick", overrides=[("repeats", repeats)] if repeats else [])
    return adapted_spec(session, spec, max_cell_s=max_cell_s) if scale == "adapted" else spec


class DirtyTreeError(RuntimeError):
    """The checkout has uncommitted changes and the reproduction was not allowed to run on it."""


REPRODUCE_TAG = "reproduce"


def enqueue_reproduction(
    *,
    settings: Any,
    scale: str = "seed",
    repeats: int | None,
    presets: Sequence[str] = PRESETS,
    allow_dirty: bool = False,
    until_decided: Any = None,
    max_cell_s: float = DEFAULT_MAX_CELL_S,
) -> dict[str, dict[str, Any]]:
    """Queue the seed presets (tagged ``reproduce``), with the verdict rules frozen on each;
    returns per preset its meta and run ids. DirtyTreeError when the checkout has uncommitted
    changes and ``allow_dirty`` is not set: a published result comes from one clean commit.
    ``scale``: seed, adapted (cells lengthened from the stored history, up to ``max_cell_s``) or
    quick; ``until_decided``: the :class:`~lab.specs.schema.UntilDecided` settings stored with each.

    Returns at once: the lab's worker (or :func:`reproduce`) executes the runs.
    """
    from lab.measurement.environment import provenance
    from lab.report.verdicts import frozen_rules

    code = provenance()
    if code.dirty and not allow_dirty:
        raise DirtyTreeError(
            f"the lab's checkout has uncommitted changes (commit {code.commit}): commit them, or "
            "pass --allow-dirty (the report will say so at the top)"
        )
    rules = {**frozen_rules(), "lab_git_commit": code.label, "allowed_dirty": code.dirty}
    from sqlalchemy.orm import Session

    from db.engine import get_engine
    from lab.queue import experiments
    from lab.specs.schema import ExperimentSpec

    engine = get_engine(settings.resolved_database_url)
    experiments_meta: dict[str, dict[str, Any]] = {}
    for preset in presets:
        with Session(engine) as session:
            spec = scaled_preset(session, preset, scale=scale, repeats=repeats, max_cell_s=max_cell_s)
            if until_decided is not None:
                spec = spec.model_copy(update={"until_decided": until_decided})
            experiment = experiments.enqueue_experiment(
                session=session, spec=spec, tags=REPRODUCE_TAG, frozen_rules=rules
            )
            experiments_meta[preset] = _meta_from_spec(
                ExperimentSpec.model_validate(experiment.spec), experiment.id, rules
            )
            experiments_meta[preset]["run_ids"] = [run.id for run in experiment.runs]
    return experiments_meta


def latest_reproduction(
    *, settings: Any, presets: Sequence[str] = PRESETS, scale: str | None = None
) -> dict[str, dict[str, Any]]:
    """The newest experiment of each seed preset (its meta), of ``scale`` (seed, adapted, quick) if given."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from db.engine import get_engine
    from db.models import Experiment
    from lab.specs.schema import ExperimentSpec

    engine = get_engine(settings.resolved_database_url)
    found: dict[str, dict[str, Any]] = {}
    with Session(engine) as session:
        for preset in presets:
            query = select(Experiment).where(Experiment.preset == preset).order_by(Experiment.id.desc())
            if scale is not None:
                # Seed-scale experiments stored before the scales were renamed say "full".
                query = query.where(Experiment.scale.in_((scale, "full") if scale == "seed" else (scale,)))
            for experiment in session.scalars(query):
                try:
                    spec = ExperimentSpec.model_validate(experiment.spec)
                except ValueError:  # stored by an older lab whose spec no longer validates: skipped
                    continue
                found[preset] = _meta_from_spec(spec, experiment.id, experiment.frozen_rules)
                break
    return found


def report_from_experiments(
    *,
    settings: Any,
    experiments_meta: dict[str, dict[str, Any]],
    output_dir: Path,
    command: str | None = None,
    price_per_hour: float | None = None,
) -> tuple[dict[str, Path], bool]:
    """Write the report from stored experiments; returns (files written, every run done).

    ``command`` (what produced the runs) defaults to the reproduce command of their scale and repeats."""
    if command is None:
        command = reproduction_command(
            scale=next((str(meta.get("scale")) for meta in experiments_meta.values()), "seed"),
            repeats=max((meta.get("repeats") or 1 for meta in experiments_meta.values()), default=None),
        )
    from sqlalchemy.orm import Session

    from db import store
    from db.engine import get_engine
    from lab.queue import experiments

    engine = get_engine(settings.resolved_database_url)
    records_by_preset: dict[str, list[dict[str, Any]]] = {}
    environment: dict[str, Any] = {}
    with Session(engine) as session:
        for preset, meta in experiments_meta.items():
            runs = store.list_runs(session=session, experiment_ids=meta["ids"], newest_first=False)
            records_by_preset[preset] = [published_record(run) for run in runs]
            if figures := experiments.wall_and_measured_s(runs):
                meta["wall_s"], meta["measured_s"] = figures
            if not environment:
                environment = next((dict(run.environment) for run in runs if run.environment), {})
        capacity = latest_capacity_section(session=session)
    if not environment:
        from lab.measurement import environment as lab_environment
        from lab.run.k6_driver import k6_version

        environment = lab_environment.capture(model=settings.default_model, k6_version=k6_version())
    meta_without_run_ids = {p: {k: v for k, v in m.items() if k != "run_ids"} for p, m in experiments_meta.items()}
    written = write_report(
        records_by_preset=records_by_preset,
        experiments_meta=meta_without_run_ids,
        environment=environment,
        output_dir=Path(output_dir),
        generated_at=datetime.now().astimezone(),
        price_per_hour=price_per_hour,
        command=command,
        capacity=capacity,
        frozen_rules_versions=tuple(m.get("rules_version") for m in experiments_meta.values()),
        allowed_dirty=any(m.get("allowed_dirty") for m in experiments_meta.values()),
    )
    all_records = [r for records in records_by_preset.values() for r in records]
    return written, bool(all_records) and all(r.get("status") == "done" for r in all_records)


def reproduce(
    *,
    settings: Any,
    scale: str = "seed",
    repeats: int | None,
    output_dir: Path,
    presets: Sequence[str] = PRESETS,
    price_per_hour: float | None = None,
    allow_dirty: bool = False,
    until_decided: Any = None,
    max_cell_s: float = DEFAULT_MAX_CELL_S,
) -> int:
    """Queue and run the seed presets (with ``until_decided``, then more rounds of the undecided
    claims' cells within its budget, counted from the start), then write the report. 0 if every
    run is done, else 1; 2 (nothing queued) on a checkout with uncommitted changes unless ``allow_dirty``.

    The report is written either way; failed runs are listed in it.
    """
    from lab.queue import run_waiter

    started = time.monotonic()
    try:
        experiments_meta = enqueue_reproduction(
            settings=settings,
            scale=scale,
            repeats=repeats,
            presets=presets,
            allow_dirty=allow_dirty,
            until_decided=until_decided,
            max_cell_s=max_cell_s,
        )
    except DirtyTreeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for meta in experiments_meta.values():
        print(
            f"experiment #{meta['ids'][0]}: {meta['name']}: {len(meta['run_ids'])} runs queued"
            + (f" ({meta['scale_note']})" if meta["scale_note"] else ""),
            file=sys.stderr,
        )
    run_waiter.wait_for_runs(
        settings=settings, run_ids=[i for meta in experiments_meta.values() for i in meta["run_ids"]]
    )
    if until_decided is not None:
        from lab.report.extra_rounds import rounds_until_decided

        budget_left_s = until_decided.budget_s - (time.monotonic() - started)
        rounds_until_decided(settings=settings, experiments_meta=experiments_meta, budget_s=budget_left_s)
    command = reproduction_command(scale=scale, repeats=repeats, until_decided=until_decided)
    written, all_done = report_from_experiments(
        settings=settings,
        experiments_meta=experiments_meta,
        output_dir=output_dir,
        command=command,
        price_per_hour=price_per_hour,
    )
    print(f"report written: {written['README.md']} and {written['report.html']}", file=sys.stderr)
    if overhead := overhead_sentence(experiments_meta):
        print(overhead, file=sys.stderr)
    return 0 if all_done else 1


def reproduction_command(*, scale: str, repeats: int | None, until_decided: Any = None) -> str:
    until = f" --until-decided --budget {until_decided.budget_s:g}s" if until_decided is not None else ""
    return (
        "python -m lab reproduce"
        + (f" --scale {scale}" if scale != "seed" else "")
        + (f" --repeats {repeats}" if repeats else "")
        + until
    )


def report_only(*, settings: Any, scale: str, output_dir: Path) -> int:
    """Write the report again from the newest stored reproduction of that scale (no runs).

    0 if every run is done, 1 if some are not, 2 if nothing of that scale is stored."""
    experiments_meta = latest_reproduction(settings=settings, scale=scale)
    if not experiments_meta:
        print(
            f"error: no {scale}-scale reproduction is stored: run {reproduction_command(scale=scale, repeats=None)} "
            "first",
            file=sys.stderr,
        )
        return 2
    written, all_done = report_from_experiments(
        settings=settings, experiments_meta=experiments_meta, output_dir=output_dir
    )
    print(f"report written: {written['README.md']} and {written['report.html']}", file=sys.stderr)
    return 0 if all_done else 1
