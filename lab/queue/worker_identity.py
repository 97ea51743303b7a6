"""A worker's identity on a shared queue: the overview of every worker the Workers page shows
(its hardware, described in :mod:`lab.measurement.hardware`, summarised on one line)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from db import store, worker_store
from lab.measurement.hardware import hardware_summary


@dataclass
class WorkerOverview:
    """One worker as the Workers page shows it."""

    # In the order the page shows them: what a person follows first (state, current run) on a narrow page.
    name: str
    state: str  # alive | lost (heartbeat older than the lease) | stopped
    current_run: str
    heartbeat_age_s: float | None
    labels: str
    host: str
    hardware: str
    services: str  # the managed services recorded on its machine


def worker_overview(*, session: Session, lease_s: float) -> list[WorkerOverview]:
    """Every registered worker with its heartbeat age, current run and recorded services."""
    services_by_worker: dict[str, list[str]] = {}
    for service in worker_store.list_service_records(session=session):
        services_by_worker.setdefault(service.worker, []).append(f"{service.name}: {service.state}")
    rows = []
    for record in worker_store.list_workers(session=session):
        age_s = worker_store.heartbeat_age_s(session=session, record=record)
        if record.state == "stopped":
            state = "stopped"
        else:
            state = "alive" if age_s is not None and age_s <= lease_s else "lost"
        current = ""
        if record.current_run_id and state == "alive":
            run = store.get_run(session=session, run_id=record.current_run_id)
            current = f"#{run.id} {run.backend} {run.cell_label}: {run.status}" if run else ""
        rows.append(
            WorkerOverview(
                name=record.name,
                host=record.host,
                labels=", ".join(record.labels or []),
                hardware=hardware_summary(record.hardware),
                state=state,
                heartbeat_age_s=round(age_s, 1) if age_s is not None else None,
                current_run=current,
                services=", ".join(services_by_worker.get(record.name, [])),
            )
        )
    return rows
