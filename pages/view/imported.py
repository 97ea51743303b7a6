"""Runs imported from other tools, on the pages: the source line of Run detail, the figures
kept under the tool's own names, and the Runs page's upload (read through ``lab import``'s
door: the users' file gate, one transaction per file)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from lab.imports import expected_files
from lab.imports.saving import ImportRefused, import_files
from lab.measurement.results import RunResults
from pages.common import session
from pages.view.members import current_member
from pages.view.text import show_plain


def imported_caption(run: Any) -> None:
    """What an imported run is, where its figures come from, and that it cannot be run again."""
    show_plain(
        f"Imported from {run.source_tool}: figures mapped onto the lab's names only where the definition is "
        "the same (docs/imports.md); the tool's other figures are listed under its own names below. "
        "An imported run cannot be run again by the lab.",
        kind="info",
    )


def foreign_figures_section(run: Any) -> None:
    """Figures from outside the lab, under their source's own names."""
    results = RunResults.from_columns(run)
    for foreign in results.foreign:
        st.markdown(f"#### {foreign.source}'s own figures")
        st.caption("No lab figure has the same definition: shown as the tool named them.")
        frame = pd.DataFrame([{"figure": name, "value": value} for name, value in sorted(foreign.figures.items())])
        st.dataframe(frame, hide_index=True, width="stretch", key=f"foreign_{foreign.source}")


def import_upload() -> None:
    """Upload result files of other tools; each is imported as ``lab import`` does."""
    with st.expander("Import results of GuideLLM, vllm bench serve or AIPerf"):
        st.caption(f"Accepted: {expected_files()}. The same file imported twice adds nothing.")
        files = st.file_uploader(
            "Result files", accept_multiple_files=True, type=["json", "yaml", "yml"], key="import_files"
        )
        if not files or not st.button("Import", key="import_button"):
            return
        with tempfile.TemporaryDirectory(prefix="lab-import-") as folder:
            paths = []
            for uploaded in files:
                # Its own name only (never a path), so the message names the file the user chose.
                path = Path(folder) / Path(uploaded.name).name
                path.write_bytes(uploaded.getvalue())
                paths.append(path)
            try:
                outcomes, refusals = import_files(session_factory=session, paths=paths, member=current_member())
            except ImportRefused as refused:
                show_plain(f"Refused: {refused}", kind="error")
                return
        for refusal in refusals:
            show_plain(refusal, kind="error")
        for outcome in outcomes:
            show_plain(outcome.line(), kind="success")
