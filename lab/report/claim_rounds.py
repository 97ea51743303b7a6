"""The verdicts the report prints, claim by claim: no verdict from a busy machine, and, for a
reproduction run until decided, each claim judged look by look and stopped at its first
decided look.

The runner asks :func:`judge_claims` which claims are still undecided and which cells they
rest on; the report prints what the same call returns, so "is it decided" is the report's own
verdict (the rules of :mod:`lab.report.verdicts`, the intervals of :mod:`lab.report.claims`).

- **Cells of a claim.** The cells whose runs its figure uses: a cell is one when leaving its
  runs out changes the figure (found by measuring, so it follows the claim's code).
- **Busy machine.** A round in which one of those cells' runs carries the contention warning
  is left out of the claim; with fewer quiet rounds than planned, the claim is
  "not judged: machine busy" (rerunning the cells gives it the rounds).
- **Until decided.** Looks after each round from the planned ones on, with intervals widened
  for repeated looks (:func:`lab.analysis.sequential.widening`); a claim stops at its first
  look whose verdict is not "inconclusive".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.analysis.aggregation import done_runs
from lab.analysis.interval_verdicts import Verdict
from lab.analysis.sequential import widening
from lab.measurement.checks import contention_warned
from lab.measurement.results import RunResults
from lab.report.claims import CLAIMS, Claim, ClaimVerdict, evaluate_claims
from lab.report.experiment_meta import ExperimentMeta
from lab.report.verdicts import UNDECIDED


@dataclass(frozen=True)
class Rounds:
    """How the reproduction's rounds are judged: ``planned`` rounds queued at first; with
    ``until_decided``, looks after each round from the planned ones on."""

    planned: int = 1
    until_decided: bool = False
    max_rounds: int = 20
    # (preset, cell label) -> what no cell under the adapted scale's cap could measure there.
    over_cap: tuple[tuple[str, str, str], ...] = ()

    def over_cap_note(self, preset: str, cells: frozenset[str]) -> str:
        notes = [text for where, label, text in self.over_cap if where == preset and label in cells]
        return f". No cell under the adapted scale's cap could measure it: {'; '.join(notes)}" if notes else ""


def _round(record: Mapping[str, Any]) -> tuple[Any, Any]:
    return record.get("experiment_id"), record.get("repeat_index")


def _signature(claim: Claim, records: list[Mapping[str, Any]]) -> tuple[Any, ...]:
    found = claim.measure(records)
    return found.ours, found.ours_low, found.ours_high, found.censored, found.why_not_measured


def claim_cells(claim: Claim, records: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The cell labels whose runs ``claim``'s figure uses."""
    records = list(records)
    whole = _signature(claim, records)
    labels = {str(r["cell_label"]) for r in done_runs(records) if r.get("cell_label")}
    return frozenset(
        label for label in labels if _signature(claim, [r for r in records if r.get("cell_label") != label]) != whole
    )


@dataclass(frozen=True)
class ClaimRounds:
    """One claim's verdict (an :func:`evaluate_claims` row) with its cells and rounds."""

    verdict: ClaimVerdict
    cells: frozenset[str]
    rounds: int
    busy_runs: tuple[int, ...]

    @property
    def undecided(self) -> bool:
        """More rounds of its cells may decide it."""
        return self.verdict["verdict"] in UNDECIDED and bool(self.cells)


def _quiet(
    records: Sequence[Mapping[str, Any]], cells: frozenset[str]
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The records without the rounds in which a run of the claim's cells was warned busy, and those runs."""
    busy = [
        r
        for r in done_runs(records)
        if r.get("cell_label") in cells and contention_warned(RunResults.of_record(r).measurement_warnings)
    ]
    busy_rounds = {_round(r) for r in busy}
    return [r for r in records if _round(r) not in busy_rounds], busy


def _rounds_of(records: Sequence[Mapping[str, Any]], cells: frozenset[str]) -> int:
    return len({_round(r) for r in done_runs(records) if r.get("cell_label") in cells})


def _busy_row(row: ClaimVerdict, busy: Sequence[Mapping[str, Any]], rounds: int, planned: int) -> ClaimVerdict:
    runs = ", ".join(
        f"#{r.get('run_id')}"
        + (f" ({other:.0f}%)" if (other := RunResults.of_record(r).other_cpu_percent_avg) is not None else "")
        for r in busy
    )
    return {
        **row,
        "verdict": Verdict.NOT_JUDGED_BUSY,
        "bound": None,
        "reason": f"other processes used more than the lab's contention threshold of a core while runs {runs} "
        f"ran, so their rounds are left out and {rounds} quiet round{'s' if rounds != 1 else ''} of the {planned} "
        f"planned remain: rerun these cells on a quiet machine. Without them: {row['reason']}",
    }


def _judge_one(
    claim: Claim,
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]],
    environment: Mapping[str, object],
    drift: float,
    rounds: Rounds,
) -> ClaimRounds:
    records = list(records_by_preset.get(claim.preset, []))
    cells = claim_cells(claim, records)
    quiet, busy = _quiet(records, cells)
    quiet_rounds = _rounds_of(quiet, cells)

    def judged(subset: Sequence[Mapping[str, Any]], widen_by: float) -> ClaimVerdict:
        return evaluate_claims(
            {**records_by_preset, claim.preset: subset}, environment, drift=drift, keys={claim.key}, widen_by=widen_by
        )[0]

    busy_ids = tuple(int(r["run_id"]) for r in busy if r.get("run_id") is not None)
    if busy and quiet_rounds < rounds.planned:
        return ClaimRounds(
            _busy_row(judged(quiet, 1.0), busy, quiet_rounds, rounds.planned), cells, quiet_rounds, busy_ids
        )
    if not rounds.until_decided or quiet_rounds <= rounds.planned:
        widen_by = 1.0
        if rounds.until_decided and quiet_rounds >= 2:
            widen_by = widening(quiet_rounds, first_look=rounds.planned, max_rounds=rounds.max_rounds)
        return ClaimRounds(
            _noted(judged(quiet, widen_by), busy_ids, quiet_rounds, rounds, cells), cells, quiet_rounds, busy_ids
        )
    # Look after each round from the planned ones on; stop at the first decided look.
    indices = sorted({r.get("repeat_index") or 0 for r in quiet if r.get("cell_label") in cells})
    row: ClaimVerdict | None = None
    used = 0
    for upto in indices[rounds.planned - 1 :]:
        subset = [r for r in quiet if (r.get("repeat_index") or 0) <= upto]
        used = _rounds_of(subset, cells)
        row = judged(subset, widening(used, first_look=rounds.planned, max_rounds=rounds.max_rounds))
        if row["verdict"] != Verdict.INCONCLUSIVE:
            break
    assert row is not None  # there are more quiet rounds than planned, so at least one look
    return ClaimRounds(_noted(row, busy_ids, used, rounds, cells), cells, used, busy_ids)


def _noted(row: ClaimVerdict, busy: tuple[int, ...], used: int, rounds: Rounds, cells: frozenset[str]) -> ClaimVerdict:
    note = rounds.over_cap_note(row["preset"], cells) if row["verdict"] == Verdict.NOT_MEASURABLE else ""
    if busy:
        note += f". Rounds with runs {', '.join(f'#{r}' for r in busy)} are left out: the machine was busy"
    if rounds.until_decided:
        state = "undecided" if row["verdict"] in UNDECIDED else "decided"
        why = ""
        if state == "undecided":
            limit = used >= rounds.max_rounds
            why = f": the {rounds.max_rounds}-round limit was reached" if limit else ": the budget ran out first"
        note += (
            f". {state.capitalize()} after {used} round{'s' if used != 1 else ''}{why} (intervals widened for a "
            "look after every round)"
        )
    return (
        {**row, "reason": row["reason"] + note, "rounds": used}
        if rounds.until_decided
        else {**row, "reason": row["reason"] + note}
    )


def rounds_of(experiments_meta: dict[str, ExperimentMeta]) -> Rounds:
    """How a reproduction's rounds are judged, from its experiments' meta (``repeats``, ``until_decided``)."""
    planned = min((int(meta.get("repeats") or 1) for meta in experiments_meta.values()), default=1)
    over_cap = tuple(
        (preset, label, str(cell["over_cap"]))
        for preset, meta in experiments_meta.items()
        for label, cell in (meta.get("cell_scales") or {}).items()
        if cell.get("over_cap")
    )
    settings = [until for meta in experiments_meta.values() if (until := meta.get("until_decided"))]
    if not settings:
        return Rounds(planned=planned, over_cap=over_cap)
    max_rounds = min(int(s.get("max_rounds", 20)) for s in settings)
    return Rounds(planned=planned, until_decided=True, max_rounds=max_rounds, over_cap=over_cap)


def judge_claims(
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]],
    environment: Mapping[str, object] | None = None,
    *,
    drift: float = 1.0,
    rounds: Rounds | None = None,
) -> list[ClaimRounds]:
    """Every claim's verdict, its cells and the rounds it rests on (see the module's docstring)."""
    return [
        _judge_one(claim, records_by_preset, dict(environment or {}), drift, rounds or Rounds()) for claim in CLAIMS
    ]
