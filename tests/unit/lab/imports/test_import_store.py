"""Imported files stored (issue 36): ``lab import`` stores one done run per benchmark, marked
with its source tool, launched by the importer and audited; the same file twice adds nothing;
a refused file adds nothing; Compare puts an imported GuideLLM run beside a lab run; the gate
compares a lab run with an imported one on per-request samples, or exits 4 naming why."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from db.engine import get_engine
from db.models import Experiment, Run, RunAudit, RunRequests, RunStatus
from lab.analysis.compare import RunRecord, generic_table
from lab.cli import entry as cli
from lab.imports import read_result_file
from lab.imports.saving import ImportRefused, save_parsed
from lab.measurement.k6_ndjson import RequestSamples
from lab.measurement.request_figures import encode
from lab.members import Member
from lab.settings import get_settings

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "imports"


@pytest.fixture()
def lab_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("LAB_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    yield get_engine(get_settings().resolved_database_url)
    get_settings.cache_clear()


def count(engine: Engine, model: type) -> int:
    with Session(engine) as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_lab_import_stores_each_benchmark_once_marked_with_its_tool(
    lab_engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [str(FIXTURES / name) for name in ("guidellm.json", "vllm-bench-detailed.json")]
    assert cli.main(["import", *files]) == 0
    assert "imported 2 run(s) from guidellm 0.8.1" in capsys.readouterr().out
    with Session(lab_engine) as session:
        runs = list(session.scalars(select(Run).order_by(Run.id)))
        assert [run.source_tool for run in runs] == ["guidellm 0.8.1", "guidellm 0.8.1", "vllm-bench 0.32"]
        assert all(run.status == RunStatus.DONE and run.cell_label.startswith(run.source_tool or "?") for run in runs)
        record = RunRecord.of(runs[0])
        assert record["source"] == "guidellm 0.8.1" and record["launched_by"] == runs[0].launched_by
        audit = list(session.scalars(select(RunAudit)))
        assert {line.action for line in audit} == {"import"} and len(audit) == 3
        assert count(lab_engine, RunRequests) == 3
    # The same file again, under another name: nothing added, the runs it already is named.
    copy = tmp_path / "copy-of-report.json"
    shutil.copy(FIXTURES / "guidellm.json", copy)
    assert cli.main(["import", str(copy)]) == 0
    assert "already imported as run #1, #2" in capsys.readouterr().out
    assert count(lab_engine, Run) == 3 and count(lab_engine, Experiment) == 2


def test_a_refused_file_adds_nothing_and_the_others_are_imported(
    lab_engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truncated = tmp_path / "cut.json"
    truncated.write_bytes((FIXTURES / "guidellm.json").read_bytes()[:5000])
    code = cli.main(["import", str(truncated), str(FIXTURES / "profile_export_aiperf.json")])
    captured = capsys.readouterr()
    assert code == 2 and len(captured.err.splitlines()) == 1 and "cut.json" in captured.err
    assert count(lab_engine, Run) == 1 and "aiperf 0.13.0" in captured.out


def test_a_file_is_stored_whole_or_not_at_all(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = read_result_file(FIXTURES / "guidellm.json")

    def fail(**_: Any) -> None:
        raise RuntimeError("the disk filled up")

    monkeypatch.setattr("lab.imports.saving.store.record_run_action", fail)
    with Session(engine) as session, pytest.raises(RuntimeError):
        save_parsed(session=session, parsed=parsed, member=Member("ann"))
    assert count(engine, Run) == 0 and count(engine, Experiment) == 0


def test_with_sign_in_only_members_import(engine: Engine) -> None:
    parsed = read_result_file(FIXTURES / "guidellm.json")
    with Session(engine) as session, pytest.raises(ImportRefused, match="not a member"):
        save_parsed(session=session, parsed=parsed, member=Member("eve", role="outsider", signed_in=True))
    with Session(engine) as session:
        outcome = save_parsed(session=session, parsed=parsed, member=Member("bob", role="member", signed_in=True))
    with Session(engine) as session:
        assert {run.launched_by for run in session.scalars(select(Run))} == {"bob"} and len(outcome.run_ids) == 2


def lab_run_like(imported: Run, **figures: Any) -> Run:
    """A lab run of the same server and load as an imported one."""
    spec = {key: value for key, value in imported.spec.items() if key != "source"}
    spec["workload"] = {"kind": "synthetic", "stream": True}
    return Run(
        spec=spec,
        backend="external",
        model=imported.model,
        workload="synthetic",
        load_kind="constant-vus",
        vus=imported.vus,
        duration_s=imported.duration_s,
        max_tokens=imported.max_tokens,
        random_seed=1,
        status=RunStatus.DONE,
        **figures,
    )


def test_compare_shows_an_imported_guidellm_run_beside_a_lab_run(engine: Engine) -> None:
    parsed = read_result_file(FIXTURES / "guidellm.json")
    with Session(engine) as session:
        save_parsed(session=session, parsed=parsed, member=Member("ann"))
        imported = session.scalars(select(Run).where(Run.vus == parsed.runs[0].load.vus)).one()
        session.add(lab_run_like(imported, req_per_s=2.4, latency_avg_s=0.41, output_tok_per_s=19.0))
        session.commit()
        records = [RunRecord.of(run) for run in session.scalars(select(Run).where(Run.vus == imported.vus))]
    table = generic_table(records)
    assert list(table["source"]) == ["guidellm 0.8.1", "lab"]
    assert set(table["vus"]) == {imported.vus} and set(table["backend"]) == {"external"}
    assert table.loc[table["source"] == "lab", "req_per_s"].item() == 2.4


def samples(latency_s: list[float]) -> dict[str, Any]:
    from array import array

    return encode(
        RequestSamples(
            latency_s=array("f", latency_s), ok=bytearray([1] * len(latency_s)), ttft_s=array("f"), tpot_s=array("f")
        )
    )


def finishing_with(engine: Engine, latency_s: list[float]) -> Callable[..., None]:
    """A stand-in for wait_for_submitted_runs: each run ends done with these per-request latencies."""

    def finish(context: object, run_ids: list[int], *, local: bool, quiet: bool = False) -> None:
        with Session(engine) as session:
            for run_id in run_ids:
                run = session.get_one(Run, run_id)
                run.status, run.requests_ok = RunStatus.DONE, len(latency_s)
                run.latency_avg_s = sum(latency_s) / len(latency_s)
                session.add(RunRequests(run_id=run_id, **samples(latency_s)))
            session.commit()

    return finish


def gate(tmp_path: Path, baseline: str, *limits: str) -> list[str]:
    spec = tmp_path / "gate.json"
    spec.write_text(
        json.dumps(
            {
                "name": "gate",
                "base": {"backend": "external", "target_url": "http://127.0.0.1:9", "model": "m", "max_tokens": 8},
            }
        )
    )
    return ["run", "--spec", str(spec), "--baseline", baseline, *[f"--fail-on-regression={x}" for x in limits]]


def test_the_gate_compares_a_lab_run_with_an_imported_one_on_its_requests(
    lab_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["import", str(FIXTURES / "guidellm.json")]) == 0
    with Session(lab_engine) as session:
        imported = session.get_one(Run, 1)
        baseline_latency = read_result_file(FIXTURES / "guidellm.json").runs[0].results.latency_avg_s
    assert baseline_latency is not None and imported.source_tool
    slower = [baseline_latency * 3 + 0.001 * i for i in range(40)]
    monkeypatch.setattr("lab.cli.run_commands.wait_for_submitted_runs", finishing_with(lab_engine, slower))
    capsys.readouterr()
    assert cli.main(gate(tmp_path, "run:1", "latency_avg_s=10", "latency_p95_s=1000")) == 3
    out = capsys.readouterr().out
    assert "imported from guidellm 0.8.1" in out and "REGRESSION latency_avg_s" in out, out
    assert "baseline requests" in out
    # Rates are not per-request figures: no verdict, and the reason named (exit 4).
    assert cli.main(gate(tmp_path, "run:1", "req_per_s=10")) == 4
    assert "not a per-request figure" in capsys.readouterr().out


def test_the_gate_against_an_import_without_samples_exits_4_naming_why(
    lab_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["import", str(FIXTURES / "profile_export_aiperf.json")]) == 0
    monkeypatch.setattr("lab.cli.run_commands.wait_for_submitted_runs", finishing_with(lab_engine, [0.3] * 10))
    assert cli.main(gate(tmp_path, "run:1", "latency_avg_s=10")) == 4
    assert "keeps no per-request latency values" in capsys.readouterr().out
