"""A page opened directly gets no 404 (issue 39): Streamlit's start-up requests under a page's
URL are answered as at the root (pages/view/core_paths.py); the real server is asked in
tests/ui/test_web_lab_round4_browser.py."""

from __future__ import annotations

import asyncio
from typing import Any

from pages.view.core_paths import PageCorePaths, root_path_of


def test_only_the_two_start_up_requests_under_one_page_are_rewritten() -> None:
    assert root_path_of("/runs/_stcore/health") == "/_stcore/health"
    assert root_path_of("/compare/_stcore/host-config") == "/_stcore/host-config"
    for other in ("/_stcore/health", "/runs/_stcore/stream", "/a/b/_stcore/health", "/runs", "//_stcore/health"):
        assert root_path_of(other) is None, other


def test_the_middleware_passes_the_root_path_on() -> None:
    seen: list[tuple[str, bytes]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((scope["path"], scope["raw_path"]))

    middleware = PageCorePaths(app)
    asyncio.run(middleware({"type": "http", "path": "/runs/_stcore/health", "raw_path": b"x"}, None, None))
    asyncio.run(middleware({"type": "http", "path": "/runs", "raw_path": b"/runs"}, None, None))
    assert seen == [("/_stcore/health", b"/_stcore/health"), ("/runs", b"/runs")]
