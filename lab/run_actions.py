"""What a member does to runs, checked and recorded: cancel, delete, tag, note, run again.

Every action asks :func:`lab.members.may_act_on_run` here, on the server, whatever the page
showed (a disabled button can be forged), refuses the whole request when one run is not the
member's to touch, and writes who did it and when to the audit table.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session

from db import store
from db.models import Run, RunNote, RunStatus
from lab.members import Member, may_act_on_run


class PermissionDenied(Exception):
    """The member may not do this; the message says why (shown as it is)."""


def _runs(session: Session, run_ids: Iterable[int]) -> list[Run]:
    runs = []
    for run_id in dict.fromkeys(int(rid) for rid in run_ids):
        run = session.get(Run, run_id)
        if run is None:
            raise LookupError(f"run {run_id} does not exist")
        runs.append(run)
    return runs


def check(member: Member, action: str, runs: Iterable[Run]) -> None:
    """Raise PermissionDenied naming the first run ``member`` may not ``action``."""
    for run in runs:
        decision = may_act_on_run(member, action=action, launched_by=run.launched_by)
        if not decision.allowed:
            raise PermissionDenied(f"run #{run.id}: {decision.reason}")


def cancel_runs(*, session: Session, member: Member, run_ids: Iterable[int]) -> list[int]:
    """Cancel queued or active runs (others are left as they are). Returns the ids cancelled."""
    runs = [run for run in _runs(session, run_ids) if run.status in (RunStatus.QUEUED, *RunStatus.ACTIVE)]
    check(member, "cancel", runs)
    for run in runs:
        store.record_run_action(
            session=session, run_id=run.id, action="cancel", actor=member.name, detail=f"was {run.status}"
        )
        store.request_cancel(session=session, run_id=run.id)  # commits the audit line with it
    return [run.id for run in runs]


def delete_runs(*, session: Session, member: Member, run_ids: Iterable[int]) -> list[int]:
    """Delete finished or queued runs (never an active one, judged at this moment: a run that
    started since the caller looked is left). Returns the ids deleted."""
    runs = [run for run in _runs(session, run_ids) if run.status not in RunStatus.ACTIVE]
    check(member, "delete", runs)
    for run in runs:
        store.record_run_action(
            session=session,
            run_id=run.id,
            action="delete",
            actor=member.name,
            detail=f"{run.backend} {run.cell_label} ({run.status}), launched by {run.launched_by}",
        )
    return store.delete_runs(session=session, run_ids=[run.id for run in runs])


def set_tags(*, session: Session, member: Member, run_id: int, tags: str) -> None:
    """Replace a run's tags (comma separated)."""
    (run,) = _runs(session, [run_id])
    check(member, "tag", [run])
    before = run.tags
    store.record_run_action(
        session=session,
        run_id=run.id,
        action="tag",
        actor=member.name,
        detail=f"{before or '-'} -> {tags.strip() or '-'}"[:2000],
    )
    store.set_run_notes(session=session, run_id=run.id, tags=tags)


def add_note(*, session: Session, member: Member, run_id: int, text: str) -> RunNote | None:
    """Add a note to a run's thread (nothing for blank text)."""
    (run,) = _runs(session, [run_id])
    check(member, "note", [run])
    if not text.strip():
        return None
    store.record_run_action(session=session, run_id=run.id, action="note", actor=member.name, detail=text.strip()[:200])
    return store.add_run_note(session=session, run_id=run.id, author=member.name, text=text.strip())


def run_again(*, session: Session, member: Member, run_id: int) -> Run:
    """Queue a copy of a run's spec, launched by ``member``."""
    (run,) = _runs(session, [run_id])
    check(member, "run_again", [run])
    copy = store.enqueue_run_again(session=session, run_id=run.id, launched_by=member.name)
    store.record_run_action(
        session=session, run_id=run.id, action="run_again", actor=member.name, detail=f"queued as run #{copy.id}"
    )
    session.commit()
    return copy
