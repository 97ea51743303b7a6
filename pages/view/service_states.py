"""A service's state as shown from the click on: "starting" or "stopping" while the lab
carries out a Start or Stop in the background, until the recorded state catches up.

Start and Stop run detached (``lab services up``/``down``): the record only changes once that
process gets going, seconds later on a loaded machine. The page keeps what it asked for
(``{name: (action, clicked at, state recorded then)}``) and shows it over the recorded state
until the record says the action took (or failed anew), or ``PENDING_MAX_S`` has passed. Pure, tested without Streamlit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

STARTING, STOPPING = "starting", "stopping"
# Past this, the recorded state is shown whatever it says (the detached command has died).
PENDING_MAX_S = 120.0
# Recorded states that show an action has taken: the overlay goes.
TAKEN: dict[str, frozenset[str]] = {
    STARTING: frozenset({"starting", "running", "unhealthy"}),
    STOPPING: frozenset({"stopped", "stopped (start cancelled)"}),
}
# Recorded states that end an action when they are new (a failed start, a process gone).
ENDED = frozenset({"failed", "dead"})

Pending = dict[str, tuple[str, float, str | None]]


def settled(action: str, state: str | None, state_before: str | None) -> bool:
    """True when the recorded ``state`` shows the action took, or ended anew."""
    return state in TAKEN[action] or (state in ENDED and state != state_before)


def shown_states(
    statuses: Sequence[Mapping[str, Any]], pending: Mapping[str, tuple[str, float, str | None]], *, now_s: float
) -> tuple[list[dict[str, Any]], Pending]:
    """The services as shown (a pending action over its recorded state; a service never
    recorded yet added as "starting"), and the actions still pending."""
    by_name = {status["name"]: status for status in statuses}
    still = {
        name: (action, at, before)
        for name, (action, at, before) in pending.items()
        if now_s - at < PENDING_MAX_S and not settled(action, (by_name.get(name) or {}).get("state"), before)
    }
    shown = [
        {**status, "state": still[status["name"]][0]} if status["name"] in still else dict(status)
        for status in statuses
    ]
    shown += [
        {"name": name, "kind": name, "state": action, "url": None, "pid": None, "started_at": None, "message": None}
        for name, (action, _, _) in still.items()
        if name not in by_name
    ]
    return shown, still
