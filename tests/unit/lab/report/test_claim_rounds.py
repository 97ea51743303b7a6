"""The report's verdicts by rounds: a claim's cells, no verdict from a busy machine, and claims
judged look by look when the reproduction runs until decided."""

from __future__ import annotations

import itertools
from typing import Any

from lab.analysis.compare import RECORD_FIELDS
from lab.analysis.interval_verdicts import Verdict
from lab.report.claim_rounds import Rounds, claim_cells, judge_claims, rounds_of
from lab.report.claims import CLAIMS
from lab.report.experiment_meta import ExperimentMeta

_ids = itertools.count(1)
BUSY = "other processes used 111% of a core on average (threshold 25%): the machine was shared"


def run(backend: str, repeat: int, req_per_s: float, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {name: None for name in RECORD_FIELDS}
    row.update(
        run_id=next(_ids),
        preset="seed-exp3",
        experiment_id=3,
        backend=backend,
        status="done",
        cell_label=f"backend={backend}",
        repeat_index=repeat,
        requests_failed=0,
        req_per_s=req_per_s,
        **extra,
    )
    return row


def exp3(naive: list[float], vllm: list[float], **by_run: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rows = [run("naive", i, v, **by_run.get(f"naive{i}", {})) for i, v in enumerate(naive)]
    rows += [run("vllm", i, v, **by_run.get(f"vllm{i}", {})) for i, v in enumerate(vllm)]
    return {"seed-exp3": rows}


def judged(records: dict[str, list[dict[str, Any]]], rounds: Rounds, key: str = "exp3-vllm-over-naive") -> Any:
    return next(item for item in judge_claims(records, rounds=rounds) if item.verdict["key"] == key)


def test_a_claims_cells_are_the_runs_its_figure_uses() -> None:
    records = exp3([0.02, 0.021, 0.0205], [1.0, 1.02, 1.01])["seed-exp3"]
    claim = next(c for c in CLAIMS if c.key == "exp3-vllm-over-naive")
    assert claim_cells(claim, records) == {"backend=naive", "backend=vllm"}


def test_a_claim_whose_runs_shared_the_machine_is_not_judged() -> None:
    records = exp3(
        [0.02, 0.021, 0.0205], [1.0, 1.02, 1.01], vllm1={"measurement_warnings": BUSY, "other_cpu_percent_avg": 111.5}
    )
    busy = judged(records, Rounds(planned=3))
    assert busy.verdict["verdict"] == Verdict.NOT_JUDGED_BUSY and busy.undecided
    assert "rerun these cells on a quiet machine" in busy.verdict["reason"] and "(112%)" in busy.verdict["reason"]
    assert busy.cells == {"backend=naive", "backend=vllm"}


def test_a_rerun_round_replaces_the_busy_one() -> None:
    records = exp3([0.02, 0.021, 0.0205, 0.0202], [1.0, 1.02, 1.01, 1.0], vllm1={"measurement_warnings": BUSY})
    rerun = judged(records, Rounds(planned=3))
    assert rerun.verdict["verdict"] == Verdict.HELD and rerun.rounds == 3
    assert "left out: the machine was busy" in rerun.verdict["reason"]


def test_until_decided_stops_each_claim_at_its_first_decided_look() -> None:
    # Three shaky rounds (inconclusive), then steady ones: decided after a few more.
    naive = [0.07, 0.03, 0.05] + [0.02] * 14
    vllm = [1.0, 1.1, 1.05] + [1.0] * 14
    plain = judged(exp3(naive[:3], vllm[:3]), Rounds(planned=3))
    assert plain.verdict["verdict"] == Verdict.INCONCLUSIVE
    sequential = judged(exp3(naive, vllm), Rounds(planned=3, until_decided=True))
    # Decided before the rounds on record run out (at 10 with the paired geometric-mean interval).
    assert sequential.verdict["verdict"] == Verdict.HELD and 3 < sequential.rounds < len(naive)
    assert f"Decided after {sequential.rounds} rounds" in sequential.verdict["reason"]


def test_until_decided_widens_even_the_first_look() -> None:
    records = exp3([0.07, 0.03, 0.05], [1.0, 1.1, 1.05])
    fixed = judged(records, Rounds(planned=3))
    looked = judged(records, Rounds(planned=3, until_decided=True))
    assert looked.verdict["ours_low"] < fixed.verdict["ours_low"] and looked.undecided
    assert "Undecided after 3 rounds: the budget ran out first" in looked.verdict["reason"]


def test_rounds_come_from_the_experiments_meta() -> None:
    assert rounds_of({"seed-exp1": {"repeats": 3}}) == Rounds(planned=3)
    meta: dict[str, ExperimentMeta] = {
        "seed-exp1": {"repeats": 3, "until_decided": {"budget_s": 7200, "max_rounds": 12}}
    }
    assert rounds_of(meta) == Rounds(planned=3, until_decided=True, max_rounds=12)
