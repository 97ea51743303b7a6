"""Typed results: one field list from the store's columns to RunResults, the records and the CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from db import store
from db.models import RESULT_COLUMNS, Run
from lab.analysis.compare import RECORD_FIELDS, RunRecord
from lab.analysis.safe_csv import records_to_csv
from lab.measurement.k6_ndjson_files import stream_series
from lab.measurement.k6_results import client_figures, parse_summary
from lab.measurement.results import RESULT_FIELDS, ClientFigures, RunResults, ServerFigures
from lab.measurement.server_metrics import response_cache_part
from lab.queue import experiments
from lab.specs.schema import load_preset

K6_FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "k6"


def test_results_records_and_csv_share_the_store_s_result_columns() -> None:
    assert RESULT_FIELDS == RESULT_COLUMNS
    assert list(RunResults.figure_names()) == list(RESULT_COLUMNS)
    assert RECORD_FIELDS[-len(RESULT_FIELDS) :] == RESULT_FIELDS
    assert all(name in Run.__table__.c for name in RESULT_FIELDS)


def test_results_take_their_parts_and_unknown_figures_never_overwrite_known_ones() -> None:
    # Before the typed contract unknown keys were dropped; now a producer's unknown name is an
    # error (tests/unit/lab/measurement/test_figures_contract.py), and a part's None never overwrites a known figure.
    results = RunResults.from_parts(ClientFigures(requests_ok=12, latency_p95_s=0.5))
    assert (results.requests_ok, results.latency_p95_s, results.prefix_cache_hit_rate) == (12, 0.5, None)
    updated = results.with_parts(ClientFigures(latency_p95_s=None), ServerFigures(prefix_cache_hit_rate=0.75))
    assert (updated.latency_p95_s, updated.prefix_cache_hit_rate) == (0.5, 0.75)
    assert "requests_total" not in updated.as_columns() and len(updated.as_columns()) == len(RESULT_FIELDS)
    with pytest.raises(TypeError):
        RunResults(requests_totl=1)  # type: ignore[call-arg]  # a misspelt field is an error, not a silent new key


def test_the_k6_parser_names_its_figures_like_the_results() -> None:
    figures = parse_summary(K6_FIXTURES / "number_story_summary.json")
    cache = response_cache_part(None, client_hit_rate=figures["response_cache_hit_rate"])
    summary = RunResults.from_parts(client_figures(figures), cache)
    assert summary.requests_ok == 12 and summary.measured_duration_s == pytest.approx(2.025, abs=0.01)
    assert summary.latency_p95_s is not None and summary.response_cache_hit_rate == pytest.approx(0.75)
    stream = RunResults.from_parts(stream_series(K6_FIXTURES / "number_story.ndjson").client_figures())
    assert stream.requests_ok == summary.requests_ok
    assert stream.output_tok_per_s == pytest.approx(stream.measured_duration_s and 1536 / stream.measured_duration_s)


def test_stored_results_come_back_in_the_record_and_the_csv(engine: Engine) -> None:
    with Session(engine) as session:
        run_id = experiments.enqueue_experiment(session=session, spec=load_preset("seed-exp1", quick=True)).runs[0].id
    results = RunResults(requests_ok=7, req_per_s=1.5, latency_p95_s=0.25, measurement_warnings="=note")
    store.set_run_status(engine=engine, run_id=run_id, status="done", **results.as_columns())
    with Session(engine) as session:
        stored = store.get_run(session=session, run_id=run_id)
        assert stored is not None
        record = RunRecord.of(stored)
    assert {name: record[name] for name in RESULT_FIELDS} == results.as_columns()
    row = next(csv.DictReader(io.StringIO(records_to_csv([record]))))
    assert (row["requests_ok"], row["latency_p95_s"], row["measurement_warnings"]) == ("7", "0.25", "'=note")
    assert json.loads(json.dumps(record, default=str))["req_per_s"] == 1.5
