"""Detached lab commands: what a page starts and must not wait for.

A page may start ``python -m lab services up NAME`` (a model can take minutes to load) or
``services down NAME``; it runs in its own session, so it outlives the Streamlit rerun that started it, and its
state shows in the services table. The page calls this instead of building argv itself,
and never imports the CLI.
"""

from __future__ import annotations

import sys

from services.processes import start_detached


def start_service_in_background(name: str) -> int:
    """Start ``python -m lab services up NAME`` detached; returns its pid."""
    return start_detached([sys.executable, "-m", "lab", "services", "up", name])


def stop_service_in_background(name: str) -> int:
    """Stop ``name`` with ``python -m lab services down NAME`` detached (a stop waits up to
    15 s for the service to end); returns its pid."""
    return start_detached([sys.executable, "-m", "lab", "services", "down", name])
