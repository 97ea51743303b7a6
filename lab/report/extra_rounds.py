"""``reproduce --until-decided``: after the planned rounds, more rounds of only the cells whose
claims are undecided (inconclusive, or not judged on a busy machine), judged by the report's own
rules (:func:`lab.report.claim_rounds.judge_claims`), until decided or the budget is spent."""

from __future__ import annotations

import sys
from collections.abc import Hashable
from typing import Any

from lab.analysis.until_decided import Outcome, Undecided, run_until_decided
from lab.report.claim_rounds import judge_claims, rounds_of
from lab.report.trust_section import assess


def stored_records(settings: Any, experiments_meta: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each preset's runs as the report reads them (published records), oldest first."""
    from sqlalchemy.orm import Session

    from db import store
    from db.engine import get_engine
    from lab.report.publish import published_record

    with Session(get_engine(settings.resolved_database_url)) as session:
        return {
            preset: [
                published_record(run)
                for run in store.list_runs(session=session, experiment_ids=meta["ids"], newest_first=False)
            ]
            for preset, meta in experiments_meta.items()
        }


def undecided_claims(
    records_by_preset: dict[str, list[dict[str, Any]]], experiments_meta: dict[str, Any]
) -> list[Undecided]:
    """The claims more rounds may decide, each with its (preset, cell) pairs, as the report judges them."""
    judged = judge_claims(records_by_preset, drift=assess(records_by_preset).drift, rounds=rounds_of(experiments_meta))
    return [
        Undecided(item.verdict["key"], frozenset((item.verdict["preset"], cell) for cell in item.cells), item.rounds)
        for item in judged
        if item.undecided
    ]


def rounds_until_decided(*, settings: Any, experiments_meta: dict[str, dict[str, Any]], budget_s: float) -> Outcome:
    """Add rounds of the undecided claims' cells until every claim is decided or ``budget_s`` is spent."""
    from sqlalchemy.orm import Session

    from db.engine import get_engine
    from lab.queue import rounds, run_waiter

    engine = get_engine(settings.resolved_database_url)
    max_rounds = rounds_of(experiments_meta).max_rounds

    def by_preset(cells: frozenset[Hashable]) -> dict[str, set[str]]:
        grouped: dict[str, set[str]] = {}
        for preset, label in (cell for cell in cells if isinstance(cell, tuple)):
            grouped.setdefault(preset, set()).add(label)
        return grouped

    def round_s(cells: frozenset[Hashable]) -> float:
        with Session(engine) as session:
            return sum(
                rounds.round_seconds(session, experiments_meta[preset]["ids"][0], labels)
                for preset, labels in by_preset(cells).items()
            )

    def run_round(cells: frozenset[Hashable]) -> None:
        run_ids: list[int] = []
        with Session(engine) as session:
            for preset, labels in by_preset(cells).items():
                run_ids += rounds.enqueue_round(
                    session=session, experiment_id=experiments_meta[preset]["ids"][0], cells=labels
                )
        print(f"one more round: {len(run_ids)} runs of {', '.join(sorted(map(str, cells)))}", file=sys.stderr)
        run_waiter.wait_for_runs(settings=settings, run_ids=run_ids)

    def look() -> list[Undecided]:
        return undecided_claims(stored_records(settings, experiments_meta), experiments_meta)

    outcome = run_until_decided(
        look=look, run_round=run_round, round_s=round_s, budget_s=budget_s, max_rounds=max_rounds
    )
    left = ", ".join(item.key for item in outcome.undecided) or "none"
    print(
        f"until decided: {outcome.rounds_added} rounds added, stopped: {outcome.stop_reason}; undecided: {left}",
        file=sys.stderr,
    )
    return outcome
