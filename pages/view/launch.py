"""What every launch control shows: the run count and a time estimate from past runs of the
same configuration (start-up and graceful stop included), a confirmation above ten minutes,
and a box of ``key=value`` overrides (the CLI's ``--set``) for any setting a form lacks."""

from __future__ import annotations

from typing import Any

import streamlit as st

from lab import history
from lab.specs.schema import ExperimentSpec, SpecError, parse_set_option, with_overrides
from pages.common import session
from pages.view.tables import plural
from pages.view.text import plain

# Anything longer asks for a confirmation before it is queued.
CONFIRM_ABOVE_S = 600.0
OVERRIDES_HELP = (
    "One setting a line, as the CLI's --set: load.duration_s=20, max_tokens=32, "
    "grid.load.vus=[1, 4] (an axis), repeats=3, vllm.dtype=float32. Values are JSON where they parse."
)


def duration_text(seconds: float) -> str:
    """``"about 40 s"``, ``"about 14 min"``, ``"about 2 h 05 min"``."""
    if seconds < 90:
        return f"about {max(1, round(seconds / 5) * 5):.0f} s"
    minutes = round(seconds / 60)
    return f"about {minutes} min" if minutes < 120 else f"about {minutes // 60} h {minutes % 60:02d} min"


def estimate_text(estimate: history.Estimate) -> str:
    """The run count, the estimate and where it came from, in one line."""
    if estimate.runs_from_history == estimate.runs and estimate.starts_from_history == estimate.starts:
        source = "from past runs of the same configurations"
    elif estimate.runs_from_history or estimate.starts_from_history:
        source = (
            f"{estimate.runs_from_history} of {plural(estimate.runs, 'run')} and {estimate.starts_from_history} "
            f"of {plural(estimate.starts, 'start-up')} timed from past runs, the rest guessed"
        )
    else:
        source = "no past run of these configurations: load plus half the graceful stop, start-up guessed"
    return (
        f"{plural(estimate.runs, 'run')}, {duration_text(estimate.seconds)} in all "
        f"({plural(estimate.starts, 'service start')}, warm-up and graceful stops included; {source})."
    )


@st.cache_data(ttl=30.0, show_spinner=False)
def _estimate(database_url: str, specs: tuple[str, ...]) -> history.Estimate:
    import json

    with session() as db_session:
        return history.estimate_runs(session=db_session, specs=[json.loads(spec) for spec in specs])


def estimate_specs(specs: list[dict[str, Any]]) -> history.Estimate:
    """The estimate of run specs (as stored), cached for half a minute."""
    import json

    from pages.common import settings

    return _estimate(settings().resolved_database_url, tuple(json.dumps(spec, sort_keys=True) for spec in specs))


def experiment_run_specs(spec: ExperimentSpec) -> list[dict[str, Any]]:
    """Every run an experiment queues, as stored specs."""
    return [run_spec.model_dump(mode="json") for _, _, run_spec in spec.expand()]


def launch_button(specs: list[dict[str, Any]], *, label: str, key: str) -> bool:
    """The estimate, a confirmation when it is over ten minutes, and the button; True when clicked
    (and confirmed)."""
    estimate = estimate_specs(specs)
    st.caption(plain(estimate_text(estimate)))
    long = estimate.seconds > CONFIRM_ABOVE_S
    confirmed = not long or st.checkbox(
        f"Yes, queue {plural(estimate.runs, 'run')} taking {duration_text(estimate.seconds)}",
        key=f"{key}_confirm",
        help="Launches estimated at over ten minutes ask first; the queue can be stopped on Runs.",
    )
    return st.button(label, type="primary", key=key, disabled=not confirmed)


def overrides_box(key: str, *, value: str = "") -> list[tuple[str, Any]] | None:
    """The ``key=value`` lines typed (None, after a message beside the box, when one is not one)."""
    text = st.text_area(
        "Change settings (key=value, one a line)",
        value=value,
        key=key,
        help=OVERRIDES_HELP,
        height=100,
        # An example that cannot be read as a setting already made beside fields that say otherwise.
        placeholder="empty: the settings above as they are",
    )
    try:
        return [parse_set_option(line.strip()) for line in text.splitlines() if line.strip()]
    except SpecError as error:
        st.error(plain(str(error)), icon="⚠️")
        return None


def overridden(spec: ExperimentSpec, overrides: list[tuple[str, Any]]) -> ExperimentSpec | None:
    """``spec`` with the overrides applied; None (after the message) when they make it invalid."""
    if not overrides:
        return spec
    try:
        return with_overrides(spec.model_dump(mode="json"), overrides)
    except SpecError as error:
        st.error(plain(f"These settings cannot be used: {error}"), icon="⚠️")
        return None
