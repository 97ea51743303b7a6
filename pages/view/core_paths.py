"""Streamlit's two start-up requests answered under a page's own URL.

Opened directly at ``/runs``, Streamlit's browser side asks the server for its health and
host config under every base path the URL might have, the page's first
(``/runs/_stcore/health``, ``/runs/_stcore/host-config``), then the root's: two 404s in
every log for each page opened from a bookmark (streamlit/streamlit#7074). The lab is
always served at the root, so this ASGI middleware answers those two under any one-part
prefix as at the root. Pure ASGI, no Streamlit import; ``web_app.py`` mounts it.
"""

from __future__ import annotations

from typing import Any

# The start-up requests Streamlit's browser side sends under each possible base path.
PROBED = ("health", "host-config")

Scope = dict[str, Any]


def root_path_of(path: str) -> str | None:
    """``/_stcore/health`` for ``/runs/_stcore/health``; None for any other path."""
    parts = path.split("/")
    if len(parts) == 4 and parts[0] == "" and parts[1] and parts[2] == "_stcore" and parts[3] in PROBED:
        return f"/_stcore/{parts[3]}"
    return None


class PageCorePaths:
    """ASGI middleware: a page-prefixed health or host-config request served as the root's."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and (path := root_path_of(scope.get("path", ""))) is not None:
            scope = {**scope, "path": path, "raw_path": path.encode()}
        await self.app(scope, receive, send)
