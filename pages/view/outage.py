"""What the pages show while the lab's database cannot be reached.

A page, or a live view's refresh, that meets an unreachable database (stopped, restarting,
the network) says so in one line, with the time the outage was first seen, instead of
Streamlit's "This app has encountered an error"; runs in progress go on meanwhile (their
worker keeps the final state until the database is back). The whole page retries every
:data:`OUTAGE_RETRY_S` seconds and is itself again once the database answers; a live view
retries at its own refresh. Any other error is raised as before.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import streamlit as st

from lab.run.decisions import database_unreachable

OUTAGE_RETRY_S = 5.0
_SINCE_KEY = "database_outage_since"
_SHOWN_AT_KEY = "database_outage_shown_at"
_REASON_MAX_CHARS = 160


def outage_reason(error: BaseException) -> str | None:
    """One line saying why the database cannot be reached, or None when ``error`` is not that."""
    if not database_unreachable(error):
        return None
    original = getattr(error, "orig", None) or error
    lines = [line.strip() for line in str(original).splitlines() if line.strip()]
    reason = lines[0] if lines else type(original).__name__
    return reason if len(reason) <= _REASON_MAX_CHARS else reason[: _REASON_MAX_CHARS - 1] + "…"


def outage_message(reason: str, since: datetime) -> str:
    return (
        f"The lab's database is not answering ({reason}), since {since:%H:%M:%S} UTC. Runs in progress "
        f"go on and store their figures once it is back; this view tries again every few seconds."
    )


def show_outage(reason: str, view: str = "page") -> None:
    """The outage's one line; the time ``view`` first saw it is kept until the database answers it."""
    since = st.session_state.setdefault(f"{_SINCE_KEY}:{view}", datetime.now(UTC))
    st.warning(outage_message(reason, since), icon=":material/cloud_off:")


def outage_over(view: str = "page") -> None:
    """The database answered ``view``: forget when its outage began. Kept per view, because the
    sidebar answering says nothing of the page's own queries."""
    st.session_state.pop(f"{_SINCE_KEY}:{view}", None)


@contextmanager
def page_survives_database_outage() -> Iterator[None]:
    """Around a whole page: an unreachable database shows its line, and the page runs again
    every :data:`OUTAGE_RETRY_S` seconds until it answers."""
    try:
        yield
    except Exception as error:
        reason = outage_reason(error)
        if reason is None:
            raise
        show_outage(reason)
        st.session_state[_SHOWN_AT_KEY] = time.monotonic()
        st.fragment(_retry_the_page, run_every=OUTAGE_RETRY_S)()
        return
    outage_over()


def _retry_the_page() -> None:
    # Drawn once with the page (too soon to retry), then run every OUTAGE_RETRY_S seconds.
    if time.monotonic() - st.session_state.get(_SHOWN_AT_KEY, 0.0) >= OUTAGE_RETRY_S * 0.8:
        st.rerun(scope="app")


def view_survives_database_outage(view: Callable[..., Any]) -> Callable[..., Any]:
    """For a live view's fragment: an unreachable database shows its line in the view, which
    tries again at its next refresh."""

    @functools.wraps(view)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            result = view(*args, **kwargs)
        except Exception as error:
            reason = outage_reason(error)
            if reason is None:
                raise
            show_outage(reason, view.__qualname__)
            return None
        outage_over(view.__qualname__)
        return result

    return guarded
