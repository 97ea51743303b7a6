"""Does a freshly started backend measure differently from one that already served a run?

Interleaved rounds switch backends every few runs; keeping an experiment's backends started
side by side avoids restarts, but only matters if a restart moves the figures. This measures
the same cell (vLLM, number-story with 50 prompts, 32 VUs, 30 s by default) alternately on a
fresh instance (vLLM stopped just before the run) and on a warm one (the instance the
previous run used), in pairs, and prints each run's steady req/s (vLLM's counters over the
load window; k6's beside it) and machine-speed index, the ratio fresh over warm with its 95%
interval (paired by pair, log scale), and the spread across fresh instances.

    .venv/bin/python -m benchmarks.restart_shift [--pairs 3] [--duration-s 30] [--vus 32]

It starts and stops vLLM (one instance at a time) on this machine, about 2 minutes a pair.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.lab_runs import run_experiment


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--vus", type=int, default=32)
    args = parser.parse_args(argv)

    from db.engine import get_engine
    from lab.analysis.statistics import ratio_interval
    from lab.measurement.machine_speed import run_calibration_s, speed_indices
    from lab.settings import Settings
    from lab.specs.schema import ExperimentSpec

    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="restart-shift-")))
    engine = get_engine(settings.resolved_database_url)
    spec = ExperimentSpec.model_validate(
        {
            "name": "restart shift",
            "repeats": 1,
            "base": {
                "backend": "vllm",
                "workload": {"kind": "number-story", "prompts": 50},
                "load": {"kind": "constant-vus", "vus": args.vus, "duration_s": args.duration_s},
                "max_tokens": 128,
            },
        }
    )
    fresh: list[float] = []  # req/s of each pair's first run (a fresh vLLM) and of its second (warm)
    warm: list[float] = []
    calibration: dict[int, float | None] = {}
    for pair in range(args.pairs):
        # run_experiment stops the services it started after each call: the first run of a
        # call is on a fresh instance; a second spec in the same call reuses it warm.
        both = ExperimentSpec.model_validate({**spec.model_dump(), "repeats": 2, "order": "blocks"})
        first, second = run_experiment(engine=engine, settings=settings, spec=both)
        for label, run, into in (("fresh", first, fresh), ("warm", second, warm)):
            # The steady figure (vLLM's own counters over the load window): at 32 VUs a request
            # takes about as long as the run, so k6's req/s moves with where the last ones end.
            into.append(run.steady_req_per_s or run.req_per_s)
            calibration[run.id] = run_calibration_s(run.machine_calibration_before_s, run.machine_calibration_after_s)
            print(
                f"pair {pair + 1} {label}: run #{run.id} {run.status} steady {run.steady_req_per_s or 0:.3f} req/s "
                f"({run.steady_output_tok_per_s or 0:.1f} tok/s), k6 {run.req_per_s or 0:.3f} req/s, "
                f"kernel {calibration[run.id] or 0:.3f} s",
                flush=True,
            )
    indices = speed_indices(calibration)
    print("machine-speed index per run:", ", ".join(f"#{k} {v:.2f}" for k, v in indices.items() if v))
    interval = ratio_interval(fresh, warm, paired=True)
    if interval.ratio is not None:
        bounds = "" if interval.ci95_low is None else f" [{interval.ci95_low:.3f}, {interval.ci95_high:.3f}]"
        print(f"fresh over warm steady req/s: {interval.ratio:.3f}{bounds} ({interval.method})")
    if len(fresh) > 1:
        print(
            f"fresh instances: mean {statistics.fmean(fresh):.3f} req/s, coefficient of variation "
            f"{statistics.stdev(fresh) / statistics.fmean(fresh):.1%}; warm: mean {statistics.fmean(warm):.3f}, "
            f"CV {statistics.stdev(warm) / statistics.fmean(warm):.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
