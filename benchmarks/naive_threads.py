"""The naive server's torch threads: the lab's default ("best") against torch's own choice.

Three repeats of the naive server at 1 VU (20 s, 128 tokens) with each setting, through
the lab's own runner; prints mean and 95% confidence interval (Student's t) of output
tok/s, k6 convention and steady state, and how busy the rest of the machine was.

    .venv/bin/python -m benchmarks.naive_threads [--repeats 3] [--duration-s 20]
"""

from __future__ import annotations

import argparse
import os
import tempfile

SETTINGS = {"lab default (best)": "best", "torch's default": "torch"}


def describe(values: list) -> str:
    from lab.analysis.statistics import mean_interval

    interval = mean_interval(values)
    if interval.mean is None:
        return "–"
    if interval.ci95_low is None:
        return f"{interval.mean:.2f} (n={interval.n})"
    return (
        f"{interval.mean:.2f} [{interval.ci95_low:.2f}, {interval.ci95_high:.2f}] "
        f"(±{(interval.relative_half_width or 0) * 100:.0f}%, n={interval.n})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=20)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    os.environ.setdefault("LAB_DATA_DIR", tempfile.mkdtemp(prefix="bench-threads-"))
    from benchmarks.lab_runs import run_experiment
    from db.engine import get_engine
    from lab.backends.naive import best_torch_threads, usable_cores
    from lab.settings import get_settings
    from lab.specs.schema import load_preset

    settings = get_settings()
    engine = get_engine(settings.resolved_database_url)
    print(f"cores: {usable_cores()}, lab default threads: {best_torch_threads(usable_cores())}", flush=True)
    rows = []
    for label, threads in SETTINGS.items():
        spec = load_preset(
            "seed-exp1",
            overrides=[
                ("grid.backend", ["naive"]),
                ("grid.load.vus", [1]),
                ("load.duration_s", args.duration_s),
                ("max_tokens", args.max_tokens),
                ("repeats", args.repeats),
                ("naive.torch_threads", threads),
            ],
        )
        runs = run_experiment(engine=engine, settings=settings, spec=spec)
        for run in runs:
            print(
                f"  {label} #{run.id}: {run.status} {run.output_tok_per_s or 0:.2f} tok/s, steady "
                f"{run.steady_output_tok_per_s or 0:.2f} ({run.steady_source}), other CPU "
                f"{run.other_cpu_percent_avg or 0:.0f}%, warnings: {run.measurement_warnings}",
                flush=True,
            )
        rows.append(
            (
                label,
                [r.output_tok_per_s for r in runs],
                [r.steady_output_tok_per_s for r in runs],
                [r.other_cpu_percent_avg for r in runs],
            )
        )
    print(
        "\n| torch threads | output tok/s (k6), mean [95% CI] | steady output tok/s, mean [95% CI] "
        "| other processes' CPU (% of a core) |"
    )
    print("|---|---|---|---|")
    for label, k6_figures, steady, other in rows:
        print(f"| {label} | {describe(k6_figures)} | {describe(steady)} | {describe(other)} |")


if __name__ == "__main__":
    main()
