"""A figure is declared once (db/figures.py): a figure added to a temporary copy of the
declarations is a column of the store, a column of the CSV export, a header of a page's table
(and its human CSV) and a row of the figure reference, with nothing else edited."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]

NEW_FIGURE = """
    queue_wait_p95_s: float | None = figure(
        Unit.SECONDS, "queue wait p95", "95th percentile of the time a request waited in the queue.", SERVER
    )
"""

PACKAGES = ("db", "lab", "pages", "docs_reference")


@contextlib.contextmanager
def declarations_from(copy: Path) -> Iterator[None]:
    """Every module of the store, the domain and the pages imported afresh over ``copy`` as
    ``db.figures`` (they derive their figures when imported), the real ones put back after."""
    saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] in PACKAGES}
    for name in saved:
        del sys.modules[name]
    try:
        importlib.import_module("db")
        spec = importlib.util.spec_from_file_location("db.figures", copy)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["db.figures"] = module
        spec.loader.exec_module(module)
        yield
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] in PACKAGES]:
            del sys.modules[name]
        sys.modules.update(saved)


def test_a_figure_added_to_a_copy_of_the_declarations_reaches_store_csv_page_and_reference(tmp_path: Path) -> None:
    source = (PROJECT_ROOT / "db" / "figures.py").read_text(encoding="utf-8")
    anchor = "\n\ndef _declared("
    assert anchor in source
    copy = tmp_path / "figures.py"
    copy.write_text(source.replace(anchor, NEW_FIGURE.rstrip() + "\n" + anchor, 1), encoding="utf-8")

    with declarations_from(copy):
        import pandas as pd
        from sqlalchemy.orm import Session

        engine_module = importlib.import_module("db.engine")
        models = importlib.import_module("db.models")
        compare = importlib.import_module("lab.analysis.compare")
        safe_csv = importlib.import_module("lab.analysis.safe_csv")
        names = importlib.import_module("pages.view.names")
        reference_spec = importlib.util.spec_from_file_location(
            "docs_reference", PROJECT_ROOT / "scripts" / "docs_reference.py"
        )
        assert reference_spec is not None and reference_spec.loader is not None
        docs_reference = importlib.util.module_from_spec(reference_spec)
        sys.modules["docs_reference"] = docs_reference
        reference_spec.loader.exec_module(docs_reference)

        engine = engine_module.make_engine(f"sqlite:///{tmp_path / 'lab.db'}")
        importlib.import_module("db.migrations").upgrade(engine)
        with Session(engine) as session:
            run = models.Run(
                spec={},
                backend="naive",
                model="m",
                workload="chat",
                load_kind="constant-vus",
                duration_s=10.0,
                max_tokens=16,
                random_seed=1,
                status="done",
                queue_wait_p95_s=0.25,
            )
            session.add(run)
            session.commit()
            record = compare.RunRecord.of(session.get(models.Run, run.id))
        engine.dispose()
        csv_lines = safe_csv.records_to_csv([record]).splitlines()
        page_table = names.display_frame(pd.DataFrame([record]))
        human_csv = safe_csv.dataframe_to_csv(names.csv_frame(pd.DataFrame([record]), human=True)).splitlines()[0]
        reference = [line for line in docs_reference.figures_page().splitlines() if "queue_wait_p95_s" in line]
        stored = "queue_wait_p95_s" in models.Run.__table__.c

    assert stored
    header, row = csv_lines[0].split(","), csv_lines[1].split(",")
    assert header[-1] == "queue_wait_p95_s" and row[-1] == "0.25"
    assert page_table["queue wait p95 (s)"].tolist() == ["0.250"]
    assert "queue wait p95 (s)" in human_csv
    assert reference == [
        "| `queue_wait_p95_s` | seconds | queue wait p95 (s) | float |  "
        "| 95th percentile of the time a request waited in the queue. |"
    ]
