"""Coverage of the sequential intervals of ``--until-decided`` (lab/analysis/sequential.py), by simulation.

2,000 simulated experiments, each looking after every round from the first look up to 20
rounds: how often every look's interval held the true ratio (the guarantee: at least 95%),
how often it held at the round "until decided" stopped, and the same for the plain 95% t
interval looked at after every round (what the sequential method avoids).

    .venv/bin/python -m benchmarks.sequential_coverage [--experiments 2000] [--output FILE]

Pure computation, about a second; writes the figures as JSON (docs/benchmarks/sequential_coverage.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from datetime import UTC, datetime
from pathlib import Path

from lab.analysis.sequential import MAX_ROUNDS, SEQUENTIAL_METHOD, simulate_coverage

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "sequential_coverage.json"
# (label, first look, true ratio, per-round log sd, heavy tails): the 1-VU comparison's spread
# (sd 0.085 of the log ratio), a wider one, no effect at all, and a heavy-tailed one.
SCENARIOS = (
    ("ratio 0.8, sd 0.15, first look after 3 rounds", 3, 0.8, 0.15, False),
    ("ratio 0.7, sd 0.085 (the 1-VU speed-up's spread), first look 3", 3, 0.7, 0.085, False),
    ("ratio 1.0 (no effect), sd 0.15, first look 3", 3, 1.0, 0.15, False),
    ("ratio 0.8, sd 0.30, first look after 2 rounds", 2, 0.8, 0.30, False),
    ("ratio 0.8, sd 0.15, first look 3, heavy tails (t, 3 df)", 3, 0.8, 0.15, True),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=2000)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    rows = []
    for index, (label, first_look, ratio, spread, heavy) in enumerate(SCENARIOS):
        coverage = simulate_coverage(
            experiments=args.experiments,
            first_look=first_look,
            true_log_ratio=math.log(ratio),
            spread=spread,
            heavy_tails=heavy,
            random_seed=index,
        )
        rows.append({"scenario": label, **dataclasses.asdict(coverage)})
        print(
            f"{label}: every look covered {coverage.sequential:.1%} (plain t at every look {coverage.fixed_t:.1%}); "
            f"covered at the stop {coverage.stopped_covered:.1%}, stopped after {coverage.mean_rounds_at_stop:.1f} "
            "rounds on average"
        )
    document = {
        "command": "python -m benchmarks.sequential_coverage",
        "date": datetime.now(UTC).date().isoformat(),
        "method": SEQUENTIAL_METHOD,
        "max_rounds": MAX_ROUNDS,
        "scenarios": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"written: {args.output.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
