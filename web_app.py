"""What ``python -m lab start`` serves: the pages of ``streamlit_app.py`` as an ASGI app, with
the one middleware that tells Streamlit's browser side the app is at the root (no 404 for a
page opened directly: pages/view/core_paths.py)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from pages.view.core_paths import RootBaseUrl

app = st.App(str(Path(__file__).resolve().parent / "streamlit_app.py"), middleware=[Middleware(RootBaseUrl)])
