"""The New experiment grid form's widgets: they fill in a :class:`~lab.specs.grid_form.GridForm`,
whose check and spec building live in the domain (``lab.specs.grid_form``).

The workload's fields and each chosen backend's are drawn from what their modules declare
(``lab.specs.options``): a new workload or backend shows its own fields here without a
line changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from lab.backends import backend_names, get_backend
from lab.specs.cache_spec import CACHE_TIERS
from lab.specs.grid_form import GridForm, check_grid_form, is_external, workload_preview
from lab.specs.options import OptionInput, backend_inputs, backend_kinds, workload_inputs
from lab.specs.schema import BACKENDS, ExperimentSpec
from lab.workloads import WORKLOADS
from lab.workloads.uploads import list_uploads
from pages.common import settings
from pages.view.text import plain

LOAD_KINDS = {"constant-vus": "constant VUs (closed loop)", "constant-arrival-rate": "arrival rate (open loop)"}
CACHE_POLICY_HELP = (
    "deterministic: only cache requests with temperature 0 or an integer seed, and n = 1 "
    "(a missing temperature means 1.0 on vLLM and the naive server: sampled, so not cached)"
)
CACHE_TIER_LABELS = {
    "exact": "exact: identical requests",
    "semantic": "semantic: paraphrases too",
    "off": "off: every request to the server",
}
CACHE_TIER_HELP = (
    "exact answers a request seen before; semantic also one similar enough to a stored prompt (by default "
    "all-MiniLM-L6-v2 on the last user turn), sometimes wrongly; off sends every request through the proxy to the "
    "server (the no-cache baseline)"
)
SIMILARITY_HELP = (
    "The least cosine similarity of a paraphrase served, above 0 and at most 1; several values make a grid axis "
    "(a threshold sweep: hit rate against false hits, on Compare)"
)
VERIFY_HELP = (
    "Share of semantic hits also asked of the server and compared with the answer served: what gives the run's "
    "false-hit rate (each one costs a request to the server)"
)
GRACEFUL_STOP_HELP = (
    "After the load time, how long k6 waits for requests still in flight before cutting them "
    "(a slow backend at high load needs longer, or its last requests count as interrupted)."
)


def field_error(errors: dict[str, str], name: str) -> None:
    """The validation message of one field, shown right under it."""
    if name in errors:
        st.error(plain(errors[name]), icon="⚠️")


def option_widget(owner: str, field: OptionInput) -> Any:
    """One declared option of ``owner`` (a workload's name, or ``backend``) as a widget;
    returns its value (None: left blank, the model's default applies)."""
    option, key = field.option, f"grid_{owner}_{field.option.path}"
    help_text = field.help or None
    if field.kind == "upload" and option.upload is not None:  # the "upload" widget is for upload options only
        uploads = list_uploads(settings().uploads_dir, option.upload)
        labels = dict(uploads)
        paths = [path for path, _ in uploads]
        if option.required:
            return st.selectbox(
                option.label,
                paths,
                format_func=lambda path: labels[path],
                key=key,
                index=None,
                help=help_text,
                placeholder="upload one on the Upload tab first",
            )
        return st.selectbox(
            option.label,
            [None, *paths],
            key=key,
            help=help_text,
            format_func=lambda path: option.none_label if path is None else labels[path],
        )
    if field.kind == "bool":
        return st.checkbox(option.label, value=bool(field.default), key=key, help=help_text)
    if field.kind == "choice":
        return st.selectbox(
            option.label, field.choices, index=field.choices.index(field.default), key=key, help=help_text
        )
    if field.kind in ("int", "float"):
        cast: Callable[[Any], Any] = int if field.kind == "int" else float
        step = cast(option.step) if option.step is not None else cast(1)
        # An optional number starts blank ("all cores") and stays None until one is typed.
        default = None if field.default is None else cast(field.default)
        value = st.number_input(option.label, value=default, step=step, key=key, help=help_text)
        return None if value is None else cast(value)
    default_text = "" if field.default is None else str(field.default)
    return st.text_input(option.label, value=default_text, key=key, help=help_text) or None


def workload_fields(form: GridForm, errors: dict[str, str]) -> None:
    """The workload's own option fields, each with its message beneath; section-wide
    messages (a rule across fields) after them."""
    sections = set()
    for field in workload_inputs(form.workload):
        form.workload_options[field.option.path] = option_widget(form.workload, field)
        field_error(errors, field.option.path)
        sections.add(field.option.section)
    for section in sorted(section for section in sections if section):
        field_error(errors, section)


def backend_fields(form: GridForm, errors: dict[str, str]) -> None:
    """An expander per chosen backend kind that declares options, with its fields (each
    message beneath) and then a message about its fields together; open when one is wrong."""
    for kind in backend_kinds(form.backends):
        inputs = backend_inputs(kind)
        if not inputs:
            continue
        wrong = any(key == kind or key.startswith(f"{kind}.") for key in errors)
        with st.expander(f"{get_backend(kind).label or kind} options", expanded=wrong):
            for field in inputs:
                form.backend_options[field.option.path] = option_widget("backend", field)
                field_error(errors, field.option.path)
            field_error(errors, kind)


def _request_fields(form: GridForm, errors: dict[str, str]) -> None:
    """The left column: workload, its options, max tokens, streaming."""
    labels = {name: workload.label or name for name, workload in WORKLOADS.items()}
    form.workload = st.selectbox("Workload", list(labels), format_func=lambda name: labels[name], key="grid_workload")
    workload_fields(form, errors)
    form.max_tokens = int(st.number_input("Max tokens per request", value=128, step=1, key="grid_max_tokens"))
    field_error(errors, "max_tokens")
    form.stream = st.checkbox(
        "Stream answers", key="grid_stream", help="Measures the client's TTFT and time per output token."
    )


def _load_fields(form: GridForm, errors: dict[str, str]) -> None:
    """The right column: load kind and levels, duration, graceful stop, repeats, the cache's policy and tier."""
    form.load_kind = st.radio(
        "Load", list(LOAD_KINDS), format_func=LOAD_KINDS.get, key="grid_load_kind", horizontal=True
    )
    if form.load_kind == "constant-vus":
        form.vus_text = st.text_input("VUs (one or more, e.g. 1, 8, 32)", value="1", key="grid_vus")
        field_error(errors, "vus_text")
    else:
        form.rates_text = st.text_input("Arrival rates per second (e.g. 0.5, 1, 2)", value="1", key="grid_rates")
        field_error(errors, "rates_text")
    form.duration_s = float(st.number_input("Duration per run (s)", value=20.0, step=5.0, key="grid_duration"))
    field_error(errors, "duration_s")
    form.graceful_stop_s = float(
        st.number_input("Graceful stop (s)", value=30.0, step=5.0, key="grid_graceful_stop", help=GRACEFUL_STOP_HELP)
    )
    field_error(errors, "graceful_stop_s")
    form.repeats = int(st.number_input("Repeats per cell", value=1, step=1, key="grid_repeats"))
    field_error(errors, "repeats")
    form.cache_policy = st.selectbox(
        "Cache policy (for +cache backends)", ["all", "deterministic"], key="grid_cache_policy", help=CACHE_POLICY_HELP
    )
    _cache_tier_fields(form, errors)


def _cache_tier_fields(form: GridForm, errors: dict[str, str]) -> None:
    """The response cache's tier and, for the semantic one, its thresholds and share verified."""
    form.cache_tier = st.selectbox(
        "Cache tier (for +cache backends)",
        CACHE_TIERS,
        index=CACHE_TIERS.index(form.cache_tier),
        format_func=lambda tier: CACHE_TIER_LABELS.get(tier, tier),
        key="grid_cache_tier",
        help=CACHE_TIER_HELP,
    )
    field_error(errors, "cache_tier")
    if form.cache_tier != "semantic":
        return
    form.similarity_text = st.text_input(
        "Similarity thresholds (one or more, e.g. 0.8, 0.9, 0.95)",
        value=form.similarity_text,
        key="grid_similarity",
        help=SIMILARITY_HELP,
    )
    field_error(errors, "similarity_text")
    form.verify_fraction = float(
        st.number_input(
            "Share of semantic hits verified (0 to 1)",
            value=form.verify_fraction,
            step=0.1,
            key="grid_verify_fraction",
            help=VERIFY_HELP,
        )
    )
    field_error(errors, "verify_fraction")


def grid_form_fields(errors: dict[str, str]) -> GridForm:
    """Every field of the grid form, each message beside its field; returns what was entered."""
    form = GridForm(model=settings().default_model)
    form.name = st.text_input("Experiment name", value=form.name, key="grid_name")
    field_error(errors, "name")
    form.backends = st.multiselect("Backends", BACKENDS, default=backend_names()[:1], key="grid_backends")
    field_error(errors, "backends")
    backend_fields(form, errors)
    if any(is_external(backend) for backend in form.backends):
        form.target_url = st.text_input(
            "Target URL (external server)", key="grid_target_url", placeholder="http://127.0.0.1:8000"
        )
        field_error(errors, "target_url")
    form.model = st.text_input("Model (folder or Hugging Face id)", value=form.model, key="grid_model")
    field_error(errors, "model")
    left, right = st.columns(2)
    with left:
        _request_fields(form, errors)
    with right:
        _load_fields(form, errors)
    preview = workload_preview(form)
    if preview:
        st.caption(plain("Before the launch, what each run will send:\n" + "\n".join(preview)))
    return form


def checked_launch(form: GridForm, errors: dict[str, str], *, clicked: bool) -> ExperimentSpec | None:
    """The spec to launch when the button was clicked on a valid form. After a failed
    launch, the messages follow the user's corrections (a rerun redraws them)."""
    if clicked:
        spec, new_errors = check_grid_form(form)
        st.session_state["grid_attempted"] = True
        st.session_state["grid_errors"] = new_errors
        if spec is None:
            st.rerun()  # draw each message beside its field
        return spec
    if st.session_state.get("grid_attempted"):
        _, current = check_grid_form(form)
        if current != errors:
            st.session_state["grid_errors"] = current
            st.rerun()
    return None
