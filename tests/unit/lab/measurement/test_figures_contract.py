"""The typed figure contract: RunResults and the store's columns agree, each figure has one
producer, a misspelt figure name fails, and a database written before the contract reads back equal."""

from __future__ import annotations

import json
import sqlite3
import typing
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from db.engine import get_engine
from db.models import RESULT_COLUMNS, Run, RunResultColumns
from lab.measurement import k6_results, server_metrics
from lab.measurement.k6_results import client_figures, parse_summary
from lab.measurement.results import (
    PARTS,
    ClientFigures,
    ForeignFigures,
    ResourceFigures,
    RunResults,
    UnknownFigureError,
    whole_test_rate,
)

DATABASES = Path(__file__).resolve().parents[3] / "fixtures" / "databases"
K6_FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "k6"


def _column_types() -> dict[str, type]:
    return {name: Run.__table__.c[name].type.python_type for name in RESULT_COLUMNS}


def test_run_results_declare_the_store_s_columns_in_order_with_their_types() -> None:
    hints = typing.get_type_hints(RunResults)
    assert RunResults.figure_names() == RESULT_COLUMNS
    assert {name: hints[name] for name in RESULT_COLUMNS} == {
        name: python_type | None for name, python_type in _column_types().items()
    }
    # The ORM's own annotations say the same (Mapped[X | None] for a nullable result column).
    column_hints = typing.get_type_hints(RunResultColumns)
    assert all(typing.get_args(column_hints[name]) == (hints[name],) for name in RESULT_COLUMNS)


def test_each_figure_has_exactly_one_producer_part() -> None:
    producers: dict[str, list[str]] = {}
    for part in PARTS:
        hints = typing.get_type_hints(part)
        for name in part.names():
            producers.setdefault(name, []).append(part.__name__)
            assert hints[name] == typing.get_type_hints(RunResults)[name], (part.__name__, name)
    assert sorted(producers) == sorted(RESULT_COLUMNS)
    assert {name: kinds for name, kinds in producers.items() if len(kinds) > 1} == {}


def test_a_producer_handing_over_a_misspelt_figure_name_fails() -> None:
    summary = parse_summary(K6_FIXTURES / "number_story_summary.json")
    misspelt = {("latency_p95s" if name == "latency_p95_s" else name): value for name, value in summary.items()}
    with pytest.raises(UnknownFigureError, match="latency_p95s"):
        client_figures(misspelt)
    backend = {"prefix_cache_hitrate": 0.5, "server_ttft_avg_s": 0.1}
    with pytest.raises(UnknownFigureError, match="prefix_cache_hitrate"):
        server_metrics.backend_part(backend)
    with pytest.raises(TypeError, match="k6_cpu_percent"):
        ResourceFigures(k6_cpu_percent=3.0)  # type: ignore[call-arg]  # the misspelling is the point
    with pytest.raises(TypeError, match="requests_okay"):
        RunResults.from_parts(ClientFigures(**{"requests_okay": 3}))


def test_the_summary_s_figures_are_its_client_figures_and_declared_counts() -> None:
    summary = parse_summary(K6_FIXTURES / "number_story_summary.json")
    assert set(summary) == set(ClientFigures.names()) | k6_results.SUMMARY_COUNTS
    client = client_figures(summary)
    assert client.figures() == {name: summary[name] for name in ClientFigures.names()}


def test_whole_test_output_rate_has_one_definition_for_summary_and_stream() -> None:
    summary = parse_summary(K6_FIXTURES / "number_story_summary.json")
    assert client_figures(summary).output_tok_per_s == whole_test_rate(
        summary["output_tokens"], summary["measured_duration_s"]
    )
    assert whole_test_rate(10, None) is None and whole_test_rate(10, 0.0) is None and whole_test_rate(None, 2) is None


def test_a_part_never_carries_another_part_s_figure() -> None:
    with pytest.raises(ValueError, match="one part of each kind"):
        RunResults.from_parts(ClientFigures(requests_ok=1), ClientFigures(requests_failed=1))


def test_foreign_figures_have_their_own_place_and_are_stored_by_source(tmp_path: Path) -> None:
    engine = get_engine(f"sqlite:///{tmp_path / 'lab.db'}")
    foreign = (ForeignFigures("vllm bench serve", {"output_throughput": 812.5}),)
    results = RunResults.from_parts(ClientFigures(requests_ok=4), foreign=foreign)
    assert "output_throughput" not in RunResults.figure_names()
    with Session(engine) as session:
        run = Run(spec={}, backend="vllm", model="m", workload="w", load_kind="constant-vus", duration_s=1)
        run.max_tokens, run.random_seed = 1, 1
        for name, value in results.as_columns().items():
            setattr(run, name, value)
        session.add(run)
        session.commit()
        read = RunResults.from_columns(session.get(Run, run.id))
    assert read == results and read.foreign_figures() == {"vllm bench serve": {"output_throughput": 812.5}}
    engine.dispose()


def test_a_database_written_before_the_typed_contract_reads_every_figure_back_equal(tmp_path: Path) -> None:
    """tests/fixtures/databases/README.md says how the dump was made (commit c96bac5's code)."""
    path = tmp_path / "before.db"
    with sqlite3.connect(path) as connection:
        connection.executescript((DATABASES / "before_typed_figures.sql").read_text())
    connection.close()
    written = json.loads((DATABASES / "before_typed_figures.json").read_text())
    engine = get_engine(f"sqlite:///{path}")  # migrations run
    with Session(engine) as session:
        runs = {str(run.id): RunResults.from_columns(run) for run in session.query(Run).order_by(Run.id)}
    engine.dispose()
    assert sorted(runs) == sorted(written) and len(runs) >= 10
    for run_id, figures in written.items():
        # Figures added since the dump was made (a trace's, ...) read back as not measured.
        assert set(figures) <= set(RESULT_COLUMNS)
        columns = runs[run_id].as_columns()
        assert {name: columns[name] for name in figures} == figures, run_id
        assert all(columns[name] is None for name in set(RESULT_COLUMNS) - set(figures)), run_id
        assert runs[run_id].foreign == ()
    dumped = set(next(iter(written.values())))
    every = max(runs.values(), key=lambda results: sum(v is not None for v in results.as_columns().values()))
    assert all(value is not None for name, value in every.as_columns().items() if name in dumped)
