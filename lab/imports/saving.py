"""Imported files stored: one experiment per file, one done run per benchmark, in one
transaction (a file is imported whole or not at all), its per-request samples kept where the
file has them, the importer recorded as launcher and in the audit trail.

A run's ``import_key`` (the file's SHA-256 and the benchmark's index) is unique: importing a
file again, by any name, adds nothing and says which runs it already is.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db import store
from db.models import Experiment, Run, RunRequests, RunStatus
from lab.imports import ImportedRun, ImportFileError, ParsedFile, read_result_file
from lab.measurement.request_figures import encode
from lab.members import Member, may_import

IMPORTED_WORKLOAD = "imported"
IMPORTED_SCALE = "imported"


class ImportRefused(PermissionError):
    """The member may not import (sign-in on, not a member); the message says why."""


@dataclass
class ImportOutcome:
    """What one file became: new runs, or the runs it already was."""

    file_name: str
    source: str
    run_ids: list[int] = field(default_factory=list)
    already: bool = False
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        ids = ", ".join(f"#{run_id}" for run_id in self.run_ids)
        if self.already:
            return f"{self.file_name}: already imported as run {ids} ({self.source}); nothing added"
        return f"{self.file_name}: imported {len(self.run_ids)} run(s) from {self.source}: {ids}"


def import_key(parsed: ParsedFile, run: ImportedRun) -> str:
    return f"{parsed.sha256}:{run.index}"


def run_spec(run: ImportedRun) -> dict[str, Any]:
    """The imported run as a spec: the lab's shape where the settings are the same (an external
    server, its model, load and output tokens), its source tool beside them. It is not a spec
    the lab can run (its workload is ``imported``), so it is kept as stored."""
    load: dict[str, Any] = {"kind": run.load.kind, "duration_s": run.load.duration_s}
    if run.load.vus is not None:
        load["vus"] = run.load.vus
    if run.load.rate_per_s is not None:
        load["rate_per_s"] = run.load.rate_per_s
    workload: dict[str, Any] = {"kind": IMPORTED_WORKLOAD, "stream": bool(run.stream)}
    if run.prompt_tokens is not None:
        workload["prompt_tokens"] = run.prompt_tokens
    return {
        "backend": "external",
        "target_url": run.target,
        "model": run.model,
        "workload": workload,
        "load": load,
        "max_tokens": run.max_tokens or 0,
        "random_seed": 0,
        "source": {"tool": run.tool, "version": run.version},
    }


def _run_row(parsed: ParsedFile, run: ImportedRun, *, launched_by: str) -> Run:
    spec = run_spec(run)
    row = Run(
        cell_label=f"{run.source} · {run.label}",
        repeat_index=0,
        spec=spec,
        backend="external",
        model=run.model,
        workload=IMPORTED_WORKLOAD,
        load_kind=run.load.kind,
        vus=run.load.vus,
        arrival_rate_per_s=run.load.rate_per_s,
        prompts=None,
        duration_s=run.load.duration_s,
        max_tokens=run.max_tokens or 0,
        random_seed=0,
        launched_by=launched_by,
        source_tool=run.source,
        import_key=import_key(parsed, run),
        status=RunStatus.DONE,
        status_reason=f"imported from {parsed.file_name} ({run.label}) by {launched_by}",
        started_at=run.started_at,
        finished_at=run.finished_at or run.started_at,
        **run.results.as_columns(),
    )
    if run.started_at is not None:
        row.created_at = run.started_at  # Trends place it when it was measured
    return row


def existing_runs(*, session: Session, parsed: ParsedFile) -> list[int]:
    keys = [import_key(parsed, run) for run in parsed.runs]
    return list(session.scalars(select(Run.id).where(Run.import_key.in_(keys)).order_by(Run.id)))


def save_parsed(*, session: Session, parsed: ParsedFile, member: Member) -> ImportOutcome:
    """Store a parsed file's runs in one transaction (or name the runs it already is)."""
    decision = may_import(member)
    if not decision.allowed:
        raise ImportRefused(decision.reason)
    source = f"{parsed.runs[0].source}"
    found = existing_runs(session=session, parsed=parsed)
    if found:
        return ImportOutcome(parsed.file_name, source, found, already=True)
    experiment = Experiment(
        name=f"import {parsed.file_name}"[:200],
        preset=None,
        scale=IMPORTED_SCALE,
        spec={
            "imported_file": parsed.file_name,
            "sha256": parsed.sha256,
            "tool": parsed.tool,
            "version": parsed.version,
        },
        launched_by=member.name,
    )
    session.add(experiment)
    rows = [_run_row(parsed, run, launched_by=member.name) for run in parsed.runs]
    experiment.runs.extend(rows)
    try:
        session.flush()
        for row, run in zip(rows, parsed.runs, strict=True):
            if run.samples is not None and len(run.samples):
                session.add(RunRequests(run_id=row.id, **encode(run.samples)))
            store.record_run_action(
                session=session,
                run_id=row.id,
                action="import",
                actor=member.name,
                detail=f"{parsed.file_name} ({run.source}, {run.label}), sha256 {parsed.sha256[:12]}",
            )
        session.commit()
    except IntegrityError:  # the same file imported at the same moment by another process
        session.rollback()
        return ImportOutcome(parsed.file_name, source, existing_runs(session=session, parsed=parsed), already=True)
    except BaseException:
        session.rollback()
        raise
    notes = [f"benchmark {run.index + 1}: {run.samples_note}" for run in parsed.runs if run.samples_note]
    return ImportOutcome(parsed.file_name, source, [row.id for row in rows], notes=notes)


def import_files(
    *,
    session_factory: Callable[[], AbstractContextManager[Session]],
    paths: list[Path],
    member: Member,
    max_bytes: int | None = None,
) -> tuple[list[ImportOutcome], list[str]]:
    """Import each file on its own (one session and transaction per file): the outcomes, and
    one line per file refused (the others are imported all the same)."""
    outcomes: list[ImportOutcome] = []
    refusals: list[str] = []
    for path in paths:
        try:
            parsed = read_result_file(path, max_bytes=max_bytes)
        except ImportFileError as error:
            refusals.append(str(error))
            continue
        with session_factory() as session:
            outcomes.append(save_parsed(session=session, parsed=parsed, member=member))
    return outcomes, refusals
