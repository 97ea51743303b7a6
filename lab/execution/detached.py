"""Detached lab commands: what a page starts and must not wait for.

A page may start ``python -m lab services up NAME`` (a model can take minutes to load);
it runs in its own session, so it outlives the Streamlit rerun that started it, and its
state shows in the services table. The page calls this instead of building argv itself,
and never imports the CLI.
"""

from __future__ import annotations

import subprocess
import sys

from services.processes import PROJECT_ROOT


def start_service_in_background(name: str) -> int:
    """Start ``python -m lab services up NAME`` detached; returns its pid."""
    process = subprocess.Popen(
        [sys.executable, "-m", "lab", "services", "up", name], cwd=PROJECT_ROOT, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return process.pid
