"""Every page goes through the entry file (``streamlit_app.py``): its gate, navigation and sidebar.

Why this is needed: with a ``pages/`` folder next to the entry file, each Streamlit server
process starts in its legacy multipage mode (``PagesManager.uses_pages_directory``, set from
the folder's existence). In that mode Streamlit does not run the entry file: it runs the
``pages/*.py`` file the URL names (``/runs`` runs ``pages/runs.py``) inside a navigation of
its own that lists the folder's files. Only a call of ``st.navigation`` switches the mode off,
for the whole process. The sign-in gate used to stop before that call, so with sign-in
configured the mode stayed on and every URL but ``/`` ran its page without the gate.

So the entry file leaves the legacy mode and calls ``st.navigation`` first on every rerun
(before the gate), and a page file run on its own renders nothing: it leaves the legacy
mode and reruns through the entry file at the same URL (same page, same query string).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

_ROUTED_BY_ENTRY_FILE: ContextVar[bool] = ContextVar("routed_by_entry_file", default=False)


@contextmanager
def routed() -> Iterator[None]:
    """Around ``page.run()`` in the entry file: the page may render."""
    token = _ROUTED_BY_ENTRY_FILE.set(True)
    try:
        yield
    finally:
        _ROUTED_BY_ENTRY_FILE.reset(token)


def leave_legacy_pages_mode() -> None:
    """When Streamlit runs this script in its legacy ``pages/`` mode, switch the mode off (for
    every session of this process) and rerun: the rerun runs the entry file, same URL."""
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def only_through_entry_file() -> None:
    """The first line of every page file: run on its own (not from the entry file's
    navigation), it renders nothing and hands over to the entry file when it can."""
    if _ROUTED_BY_ENTRY_FILE.get():
        return
    leave_legacy_pages_mode()
    st.stop()
