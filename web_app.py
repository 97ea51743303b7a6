"""What ``python -m lab start`` serves: the pages of ``streamlit_app.py`` as an ASGI app, with
the one middleware that answers Streamlit's start-up requests under a page's URL (no 404 for a
page opened directly: pages/view/core_paths.py)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from pages.view.core_paths import PageCorePaths

app = st.App(str(Path(__file__).resolve().parent / "streamlit_app.py"), middleware=[Middleware(PageCorePaths)])
