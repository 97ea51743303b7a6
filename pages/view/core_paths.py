"""No 404 for a page opened directly: the lab's server tells Streamlit's browser side that
the lab lives at the root.

Opened at ``/runs``, Streamlit's browser side does not know whether ``/runs`` is a page or
the path the whole app is served under, so it asks for its health and host config under
both, ``/runs/_stcore/health`` first: two 404s in the log for every page opened from a
bookmark (streamlit/streamlit#7074). Answering them there would be worse: the browser side
would then take ``/runs`` as the app's path and open its websocket under it. Streamlit reads
the app's address from ``window.__streamlit.BACKEND_BASE_URL`` when the embedding page sets
it, so this ASGI middleware sets it, to the root, in the HTML every page URL returns; the
browser side then asks the root only. Pure ASGI, no Streamlit import; ``web_app.py`` mounts it.
"""

from __future__ import annotations

from typing import Any

# Set before Streamlit's scripts (modules, so deferred) read it.
BASE_URL_SCRIPT = (
    b"<script>window.__streamlit=Object.assign({},window.__streamlit,"
    b'{BACKEND_BASE_URL:window.location.origin+"/"})</script>'
)
# Where Streamlit serves anything but its page HTML.
NOT_PAGES = ("/_stcore", "/static", "/media", "/component", "/app/static", "/favicon", "/manifest")

Scope = dict[str, Any]


def is_page_request(scope: Scope) -> bool:
    """A GET for a page URL (``/``, ``/runs``, ``/run_detail``), answered with Streamlit's HTML."""
    path = str(scope.get("path", ""))
    return scope.get("type") == "http" and scope.get("method") == "GET" and not path.startswith(NOT_PAGES)


def with_base_url(html: bytes) -> bytes:
    """Streamlit's page HTML with the root set as the app's address (as it was without a ``<head>``)."""
    return html.replace(b"<head>", b"<head>" + BASE_URL_SCRIPT, 1)


class RootBaseUrl:
    """ASGI middleware: page HTML says the app is at the root (no probing under the page's path)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if not is_page_request(scope):
            await self.app(scope, receive, send)
            return
        # Uncompressed, so the HTML can be read and changed here.
        headers = [(name, value) for name, value in scope.get("headers", []) if name.lower() != b"accept-encoding"]
        start: dict[str, Any] = {}
        body = bytearray()

        async def send_changed(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            content_type = dict(start.get("headers", [])).get(b"content-type", b"")
            if not content_type.startswith(b"text/html"):
                if start:
                    await send(dict(start))
                    start.clear()
                await send(message)
                return
            body.extend(message.get("body", b""))
            if message.get("more_body"):
                return
            html = with_base_url(bytes(body))
            response_headers = [(n, v) for n, v in start.get("headers", []) if n.lower() != b"content-length"]
            response_headers.append((b"content-length", str(len(html)).encode()))
            await send({**start, "headers": response_headers})
            await send({"type": "http.response.body", "body": html})

        await self.app({**scope, "headers": headers}, receive, send_changed)
