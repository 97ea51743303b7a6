"""Server-side time of the Runs and Compare pages on a database of 2,000 runs.

Seeds a temporary lab (5 quick seed-exp1 experiments x 100 repeats x 4 cells, all done,
with figures and a per-second series each), then renders each page with Streamlit's
AppTest several times and prints the median and worst wall time. Target: <= 1.5 s each.

    .venv/bin/python -m benchmarks.pages [--runs 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# This file is named pages.py: keep its folder off the path so `import pages.common`
# (what the app does) finds the app's pages/ package, not this script.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(PROJECT_ROOT))

TARGET_S = 1.5


def seed(database_url: str, runs: int) -> None:
    """Queue ``runs`` runs through lab.queue.experiments, then mark them done with figures and series."""
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    from db.engine import get_engine
    from db.models import Run, RunSeries, RunStatus
    from lab.queue import experiments
    from lab.specs.schema import load_preset
    from tests.support.seeded_lab import SEEDED_FIGURES, fake_series

    engine = get_engine(database_url)
    per_experiment = 400  # 4 cells x 100 repeats
    with Session(engine) as session:
        left = runs
        while left > 0:
            repeats = max(1, min(100, left // 4))
            experiments.enqueue_experiment(
                session=session, spec=load_preset("seed-exp1", quick=True, overrides=[("repeats", repeats)])
            )
            left -= repeats * 4
    rng = random.Random(7)
    with Session(engine) as session:
        rows = session.execute(Run.__table__.select().with_only_columns(Run.id, Run.backend, Run.vus)).all()
        for run_id, backend, vus in rows:
            if vus is None:
                raise SystemExit(f"run {run_id} names no VUs: seed-exp1's runs all do")
            figures = SEEDED_FIGURES[(backend, vus)]
            noise = rng.uniform(0.9, 1.1)
            session.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(
                    status=RunStatus.DONE,
                    requests_ok=20,
                    requests_failed=0,
                    output_tok_per_s=figures["output_tok_per_s"] * noise,
                    req_per_s=figures["req_per_s"] * noise,
                    latency_avg_s=figures["latency_avg_s"] / noise,
                    latency_p50_s=figures["latency_avg_s"] / noise,
                    latency_p95_s=figures["latency_p95_s"] / noise,
                    latency_p99_s=figures["latency_p95_s"] * 1.1,
                    latency_max_s=figures["latency_p95_s"] * 1.2,
                    environment={"cpu": "benchmark"},
                    server_metrics={"before": {}, "after": {}},
                )
            )
            session.add(RunSeries(run_id=run_id, series=fake_series(20, figures["output_tok_per_s"], vus)))
        session.commit()
    print(f"seeded {len(rows)} runs ({per_experiment} per experiment)")


def time_page(page: str, repeats: int, *, setup=None) -> list[float]:
    """Wall seconds of ``repeats`` fresh renders of ``page`` (app start + switch to it)."""
    from streamlit.testing.v1 import AppTest

    timings = []
    for _ in range(repeats):
        app = AppTest.from_file(str(PROJECT_ROOT / "streamlit_app.py"), default_timeout=120)
        app.run()
        started = time.perf_counter()
        app.switch_page(page).run()
        if setup is not None:
            setup(app)
        timings.append(time.perf_counter() - started)
        if app.exception:
            raise SystemExit(f"{page} raised: {[e.value for e in app.exception]}")
        rows = len(app.dataframe[0].value)
    print(f"  {page}: first table has {rows} rows")
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lab-pages-bench-") as data_dir:
        os.environ["LAB_DATA_DIR"] = data_dir
        os.environ.pop("LAB_DATABASE_URL", None)
        from lab.settings import get_settings

        get_settings.cache_clear()
        started = time.perf_counter()
        seed(get_settings().resolved_database_url, args.runs)
        print(f"seeding took {time.perf_counter() - started:.1f} s")

        cases = {
            "Runs (all 2,000 listed)": ("pages/runs.py", None),
            "Compare (newest experiment, 400 runs)": ("pages/compare.py", None),
        }
        results = {}
        for label, (page, setup) in cases.items():
            timings = time_page(page, args.repeats, setup=setup)
            results[label] = timings
            verdict = "ok" if statistics.median(timings) <= TARGET_S else "OVER TARGET"
            print(
                f"{label:<42} median {statistics.median(timings):.2f} s, worst {max(timings):.2f} s "
                f"over {len(timings)} renders (target <= {TARGET_S} s): {verdict}"
            )
        # Compare over all five experiments (2,000 runs): the heaviest choice a user can make.
        from streamlit.testing.v1 import AppTest

        timings = []
        for _ in range(args.repeats):
            app = AppTest.from_file(str(PROJECT_ROOT / "streamlit_app.py"), default_timeout=120)
            app.run()
            app.switch_page("pages/compare.py").run()
            widget = next(w for w in app.multiselect if w.key == "compare_experiments")
            started = time.perf_counter()
            widget.set_value([1, 2, 3, 4, 5]).run()
            timings.append(time.perf_counter() - started)
            assert not app.exception and app.dataframe[0].value["repeats"].sum() == 2000
        print(
            f"{'Compare (all 5 experiments, 2,000 runs)':<42} median {statistics.median(timings):.2f} s, "
            f"worst {max(timings):.2f} s over {len(timings)} renders (target <= {TARGET_S} s): "
            f"{'ok' if statistics.median(timings) <= TARGET_S else 'OVER TARGET'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
