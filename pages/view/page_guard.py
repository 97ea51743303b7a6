"""Every page goes through the entry file (``streamlit_app.py``): its gate, navigation and sidebar.

Why this is needed: with a ``pages/`` folder next to the entry file, each Streamlit server
process starts in its legacy multipage mode (``PagesManager.uses_pages_directory``, set from
the folder's existence). In that mode Streamlit does not run the entry file: it runs the
``pages/*.py`` file the URL names (``/runs`` runs ``pages/runs.py``) inside a navigation of
its own that lists the folder's files. Only a call of ``st.navigation`` switches the mode off,
for the whole process. The sign-in gate used to stop before that call, so with sign-in
configured the mode stayed on and every URL but ``/`` ran its page without the gate.

So the entry file leaves the legacy mode and calls ``st.navigation`` first on every rerun
(before the gate), and a page file run on its own renders nothing: when the legacy mode
picked it for a URL, it leaves the mode and runs the entry file in its place, which routes
to the same page (same URL, same query string) through the gate.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

_ROUTED_BY_ENTRY_FILE: ContextVar[bool] = ContextVar("routed_by_entry_file", default=False)


@contextmanager
def routed() -> Iterator[None]:
    """Around ``page.run()`` in the entry file: the page may render."""
    token = _ROUTED_BY_ENTRY_FILE.set(True)
    try:
        yield
    finally:
        _ROUTED_BY_ENTRY_FILE.reset(token)


def leave_legacy_pages_mode() -> bool:
    """Switch Streamlit's legacy ``pages/`` mode off (for every session of this process);
    True when this run was started in it (then Streamlit's own navigation is on the page,
    and the entry file's ``st.navigation`` replaces it in this same run)."""
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        return True
    return False


def run_entry_file() -> None:
    """Run the entry file here, as Streamlit would have: its gate, navigation and sidebar,
    then the page the URL names (this same page file, now routed)."""
    ctx = get_script_run_ctx()
    if ctx is None:
        return
    path = ctx.pages_manager.main_script_path
    module = types.ModuleType("__main__")
    module.__dict__["__file__"] = path
    exec(ctx.pages_manager.get_page_script_byte_code(path), module.__dict__)


def only_through_entry_file() -> None:
    """The first line of every page file: run on its own (not from the entry file's
    navigation) it renders nothing; picked by the legacy mode for a URL, it hands over to
    the entry file. Either way the rest of the page file does not run."""
    if _ROUTED_BY_ENTRY_FILE.get():
        return
    if leave_legacy_pages_mode():
        run_entry_file()
    st.stop()
