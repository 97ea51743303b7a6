"""``python -m lab capacity``: per backend, the largest load that meets an SLO."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from db.figures import figure_by
from lab.analysis.capacity_search import CapacityError
from lab.analysis.slo import SloError
from lab.backends import get_backend
from lab.context import LabContext
from lab.queue.capacity_plan import (
    CapacityPlan,
    capacity_plan,
    check_plan,
    create_experiment,
    load_capacity_preset,
    run_search,
    stored_plan,
)
from lab.queue.submit import open_waiter
from lab.specs.schema import SpecError, format_validation_error, parse_set_option


def plan_from_arguments(args: argparse.Namespace) -> CapacityPlan:
    """The CapacityPlan of ``python -m lab capacity`` arguments (validated by ``check_plan``)."""
    if not args.target_url and any(not _is_managed(name) for name in args.backend):
        raise SpecError("external backends need --target-url (the server's base URL)")
    return capacity_plan(
        backends=args.backend,
        slo=args.slo,
        by=args.by,
        quick=args.quick,
        min_load=args.min,
        max_load=args.max,
        max_probes=args.max_probes,
        probe_s=args.probe_s,
        repeats=args.repeats,
        target_url=args.target_url,
        settings=[parse_set_option(option) for option in args.set or []],
        name=args.name,
        preset=args.preset_name,
    )


def _is_managed(name: str) -> bool:
    try:
        return get_backend(name).managed
    except (KeyError, ValueError):
        return True  # unknown: check_plan names it


def _chosen_plan(args: argparse.Namespace, context: LabContext) -> CapacityPlan:
    """The plan the arguments name: a stored experiment's (to resume it), a preset's with the
    bounds given on the command line, or one built from ``--backend`` and ``--slo``."""
    if args.experiment is not None:
        with Session(context.engine) as session:
            return stored_plan(session=session, experiment_id=args.experiment)
    if args.preset_name:
        plan = load_capacity_preset(args.preset_name, quick=args.quick)
        given = {
            "min_load": args.min,
            "max_load": args.max,
            "max_probes": args.max_probes,
            "probe_s": args.probe_s,
            "repeats": args.repeats if args.repeats != 1 else None,
        }
        return plan.model_validate({**plan.model_dump(), **{k: v for k, v in given.items() if v is not None}})
    if not args.backend or not args.slo:
        raise SpecError("give --backend and --slo (or --preset NAME)")
    return plan_from_arguments(args)


def cmd_capacity(args: argparse.Namespace, context: LabContext) -> int:
    """Search each backend's capacity under an SLO; every probe is a run of one experiment."""
    experiment_id: int | None = args.experiment
    try:
        plan = _chosen_plan(args, context)
        check_plan(plan)
    except LookupError as error:
        print(f"error: {str(error).strip(chr(39))}", file=sys.stderr)
        return 2
    except (SpecError, CapacityError, SloError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ValidationError as error:
        print(f"error: {format_validation_error(error)}", file=sys.stderr)
        return 2
    engine = context.engine
    if experiment_id is None:
        with Session(engine) as session:
            experiment_id = create_experiment(session=session, plan=plan, tags=args.tag or "")
    print(
        f"experiment #{experiment_id}: {plan.name}: capacity search, probes of {plan.probe_s:g} s, "
        f"at most {plan.max_probes} per backend",
        file=sys.stderr,
    )

    def on_probe(backend: str, probe: Any) -> None:
        print(
            f"{backend} at {plan.dimension.label(probe.load)}: {'pass' if probe.passed else 'FAIL'} "
            f"({probe.note}) runs {', '.join(f'#{i}' for i in probe.run_ids)}",
            file=sys.stderr,
        )

    with open_waiter(context, local=getattr(args, "local", False)) as waiter:
        state = run_search(
            engine=engine,
            experiment_id=experiment_id,
            plan=plan,
            wait=waiter.wait,
            tags=args.tag or "",
            on_probe=on_probe,
        )
    result = capacity_result(experiment_id, plan, state)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_capacity(result)
    return 0 if all(entry["state"] == "done" for entry in state["backends"].values()) else 1


# A backend's goodput at its capacity, under the figure's own name (as the capacity state stores it).
GOODPUT = figure_by(lambda f: f.goodput_req_per_s).name


def capacity_result(experiment_id: int, plan: Any, state: dict[str, Any]) -> dict[str, Any]:
    """The machine-readable answer: per backend its capacity, goodput and probe runs."""
    backends_out = {}
    for name, entry in state["backends"].items():
        backends_out[name] = {
            "capacity_load": entry.get("capacity_load"),
            GOODPUT: entry.get(GOODPUT),
            "stop_reason": entry.get("stop_reason"),
            "saturated": entry.get("saturated", False),
            "lowest_failing_load": entry.get("lowest_failing_load"),
            "bounding_run_ids": entry.get("bounding_run_ids", []),
            "probes": [
                {
                    key: probe[key]
                    for key in ("load", "passed", "throughput", "slo_figure_s", "goodput_req_per_s", "run_ids", "note")
                }
                for probe in entry.get("probes", [])
            ],
        }
    return {
        "experiment_id": experiment_id,
        "slo": str(plan.parsed_slo()),
        "by": plan.by,
        "unit": plan.dimension.unit,
        "backends": backends_out,
    }


def print_capacity(result: dict[str, Any]) -> None:
    print(f"capacity under {result['slo']} (load in {result['unit']}), experiment #{result['experiment_id']}")
    print(f"{'backend':<15} {'capacity':>9} {'goodput req/s':>13} {'probes':>6}  bounding runs / why it stopped")
    for name, entry in result["backends"].items():
        capacity = "-" if entry["capacity_load"] is None else f"{entry['capacity_load']:g}"
        goodput = "-" if entry[GOODPUT] is None else f"{entry[GOODPUT]:.3f}"
        runs = ", ".join(f"#{i}" for i in entry["bounding_run_ids"]) or "-"
        print(f"{name:<15} {capacity:>9} {goodput:>13} {len(entry['probes']):>6}  {runs}; {entry['stop_reason']}")
