"""The reproduction's report from the store: the seed's three experiments read back and written
by :func:`.build.write_report`. Queueing and running them is the queue's (a long experiment,
:mod:`lab.queue.long_experiments`, whose report :func:`lab.queue.long_status.write_report` writes
through :func:`report_from_experiments`); this module renders and queues nothing.
``report_only`` writes it again from the newest stored reproduction.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from lab.analysis.wall_time import wall_and_measured_s
from lab.report.build import PRESETS, write_report
from lab.report.capacity_section import latest_capacity_section
from lab.report.experiment_meta import ExperimentMeta
from lab.report.publish import published_record
from lab.specs.schema import ExperimentSpec


def experiment_meta(spec: Any, experiment_id: int, frozen_rules: dict[str, Any] | None = None) -> ExperimentMeta:
    """What the report reads of one experiment: its name, scale, rounds, run order and frozen rules."""
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


def latest_reproduction(
    *, settings: Any, presets: Sequence[str] = PRESETS, scale: str | None = None
) -> dict[str, ExperimentMeta]:
    """The newest experiment of each seed preset (its meta), of ``scale`` (seed, adapted, quick) if given."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from db.engine import get_engine
    from db.models import Experiment

    engine = get_engine(settings.resolved_database_url)
    found: dict[str, ExperimentMeta] = {}
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
                found[preset] = experiment_meta(spec, experiment.id, experiment.frozen_rules)
                break
    return found


def report_from_experiments(
    *,
    settings: Any,
    experiments_meta: dict[str, ExperimentMeta],
    output_dir: Path,
    command: str | None = None,
    price_per_hour: float | None = None,
    plan_lines: Sequence[str] = (),
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

    engine = get_engine(settings.resolved_database_url)
    records_by_preset: dict[str, list[dict[str, Any]]] = {}
    environment: dict[str, Any] = {}
    with Session(engine) as session:
        for preset, meta in experiments_meta.items():
            runs = store.list_runs(session=session, experiment_ids=meta["ids"], newest_first=False)
            records_by_preset[preset] = [published_record(run) for run in runs]
            if figures := wall_and_measured_s(runs):
                meta["wall_s"], meta["measured_s"] = figures
            if not environment:
                environment = next((dict(run.environment) for run in runs if run.environment), {})
        capacity = latest_capacity_section(session=session)
    if not environment:
        from lab.measurement import environment as lab_environment
        from lab.run.k6_driver import k6_version

        environment = lab_environment.capture(model=settings.default_model, k6_version=k6_version())
    written = write_report(
        records_by_preset=records_by_preset,
        experiments_meta=experiments_meta,
        environment=environment,
        output_dir=Path(output_dir),
        generated_at=datetime.now().astimezone(),
        price_per_hour=price_per_hour,
        command=command,
        capacity=capacity,
        frozen_rules_versions=tuple(m.get("rules_version") for m in experiments_meta.values()),
        allowed_dirty=any(m.get("allowed_dirty") for m in experiments_meta.values()),
        plan_lines=plan_lines,
    )
    all_records = [r for records in records_by_preset.values() for r in records]
    return written, bool(all_records) and all(r.get("status") == "done" for r in all_records)


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
