"""A page opened directly gets no 404 (issue 39): the page HTML tells Streamlit's browser side
that the app is at the root, so it asks nothing under the page's own path
(pages/view/core_paths.py); the real server and browser are asked in
tests/ui/test_direct_urls_compare_axes_and_following_browser.py."""

from __future__ import annotations

import asyncio
from typing import Any

from pages.view.core_paths import BASE_URL_SCRIPT, RootBaseUrl, is_page_request

HTML = b"<!DOCTYPE html><html><head><title>Streamlit</title></head></html>"


def test_only_page_html_requests_are_changed() -> None:
    assert is_page_request({"type": "http", "method": "GET", "path": "/runs"})
    assert is_page_request({"type": "http", "method": "GET", "path": "/"})
    for path in ("/_stcore/health", "/static/js/x.js", "/media/a.png", "/component/x"):
        assert not is_page_request({"type": "http", "method": "GET", "path": path}), path
    assert not is_page_request({"type": "websocket", "path": "/_stcore/stream"})


def run(scope: dict[str, Any], content_type: bytes, body: bytes) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    seen: dict[str, Any] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.update(scope)
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body[:10], "more_body": True})
        await send({"type": "http.response.body", "body": body[10:]})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(RootBaseUrl(app)(scope, None, send))
    return sent, seen


def test_the_page_html_sets_the_root_as_the_apps_address_uncompressed() -> None:
    scope = {"type": "http", "method": "GET", "path": "/compare", "headers": [(b"accept-encoding", b"gzip")]}
    sent, seen = run(scope, b"text/html; charset=UTF-8", HTML)
    assert seen["headers"] == []
    html = b"".join(message.get("body", b"") for message in sent)
    assert html.startswith(b"<!DOCTYPE html><html><head>" + BASE_URL_SCRIPT)
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(html)).encode()


def test_anything_else_passes_unchanged() -> None:
    scope = {"type": "http", "method": "GET", "path": "/manifest.json", "headers": []}
    sent, _ = run(scope, b"application/json", b'{"name": "lab", "x": 1}')
    assert b"".join(message.get("body", b"") for message in sent) == b'{"name": "lab", "x": 1}'
    sent, _ = run({"type": "http", "method": "GET", "path": "/runs", "headers": []}, b"text/plain", b"0123456789ab")
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "http.response.body"]
