"""The idle stop: a backend a run started and nobody has used for a while is stopped, so an
801 MiB model does not sit in memory for hours after the last run.

Beside the rule that a run stops the backends it does not need before it starts
(``lab.run.steps``), the worker stops, between runs, each backend it started itself that
no run has used for ``LAB_BACKEND_IDLE_STOP_S`` seconds (300 by default, 0 = never), unless a
queued run still needs it (so never between the rounds of a queued experiment). Services
started by hand (``lab services up``, the Services page's Start) are someone's choice: left up.
The decision is pure (:func:`idle_backends_to_stop`), driven by a clock the caller passes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BackendInUse:
    """A backend service on this worker's machine as the idle stop sees it."""

    name: str
    # Started by this worker for a run; False when started by hand (lab services up, the Start button).
    started_by_worker: bool
    # When a run last used it (the caller's clock, seconds); None when unknown (never stopped then).
    last_used_s: float | None


def idle_backends_to_stop(
    backends: Sequence[BackendInUse], *, queued_backends: Collection[str], now_s: float, idle_stop_s: float
) -> list[str]:
    """The backends to stop now: started by the worker, needed by no queued run, and unused for
    ``idle_stop_s`` seconds or more. None when ``idle_stop_s`` is 0 (never)."""
    if idle_stop_s <= 0:
        return []
    stop = []
    for backend in backends:
        if (
            backend.started_by_worker
            and backend.name not in queued_backends
            and backend.last_used_s is not None
            and now_s - backend.last_used_s >= idle_stop_s
        ):
            stop.append(backend.name)
    return stop


def idle_stop_text(idle_stop_s: float) -> str:
    """The rule in words, for the Services page and the CLI."""
    if idle_stop_s <= 0:
        idle = "A backend a run started stays up until another run needs the memory (LAB_BACKEND_IDLE_STOP_S=0)"
    else:
        idle = (
            f"A backend a run started is stopped after {idle_stop_s:g} s without a run using it "
            "(LAB_BACKEND_IDLE_STOP_S; 0 = never), unless a queued run needs it (never between the rounds "
            "of a queued experiment)"
        )
    return (
        f"{idle}. A run also stops the backends it does not need before it starts (one accelerator, or few "
        "CPU cores). Services started by hand (Start here, or services up from the CLI) stay up until stopped."
    )
