"""The HTTP servers the proxy (or any raw ASGI app of the lab's benchmarks) can run under.

- ``uvicorn`` (httptools parser, uvloop): uvicorn closes idle keep-alive connections but
  has no deadline for a request's headers, so a client sending them a byte at a time holds
  its connection forever. :func:`header_timeout_protocol` adds one: from a connection's
  start, and from the first byte of each next request, the headers must be complete
  within ``header_timeout_s``, or the connection is closed.
- ``granian`` (Rust, hyper): its own ``header_read_timeout`` does the same. Granian loads
  its app by import path in a worker process, so the proxy's settings travel in an
  environment variable to :func:`app_from_environment`.
- ``granian-rsgi``: granian through its own interface, RSGI (:mod:`~services.cache_proxy.rsgi`),
  the same app behind an adapter; :func:`rsgi_app_from_environment`.

The body's deadline and size limit are the app's own (:mod:`~services.cache_proxy.bodies`),
the same under either server.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

SERVERS = ("uvicorn", "granian", "granian-rsgi")
DEFAULT_SERVER = "uvicorn"
DEFAULT_HEADER_TIMEOUT_S = 5.0
# The proxy's settings for a granian worker (JSON of ProxyConfig; the secret in hex).
SETTINGS_ENVIRONMENT_VARIABLE = "LAB_CACHE_PROXY_SETTINGS"


def log_warnings_to_stderr() -> None:
    """The proxy's own warnings (a credential bypass, said once) go to standard error, which the
    lab keeps as the service's log; INFO stays quiet (httpx would log every upstream call)."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def header_timeout_protocol(header_timeout_s: float) -> type:
    """uvicorn's httptools protocol with a deadline on each request's headers.

    The clock starts when the connection opens and at the first byte of each request,
    and stops when its headers are complete. One timer per connection checks it (at the
    deadline, or every ``header_timeout_s`` while no request is being received), so a
    request costs two attribute writes, not a timer of its own.
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        _headers_since: float | None = None
        _header_check: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._headers_since = self.loop.time()
            self._header_check = self.loop.call_later(header_timeout_s, self._check_headers)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._headers_since = self.loop.time()

        def on_headers_complete(self) -> None:
            self._headers_since = None
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_check is not None:
                self._header_check.cancel()
            super().connection_lost(exc)

        def _check_headers(self) -> None:
            self._header_check = None
            if self.transport.is_closing():
                return
            since = self._headers_since
            left_s = header_timeout_s if since is None else since + header_timeout_s - self.loop.time()
            if left_s > 0:
                self._header_check = self.loop.call_later(left_s, self._check_headers)
                return
            if self.cycle is None or self.cycle.response_complete:
                self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            self.transport.close()

    return HeaderTimeoutProtocol


def serve_uvicorn(app: Any, *, host: str, port: int, header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S) -> None:
    """Serve ``app`` with uvicorn until stopped."""
    import uvicorn

    # uvloop under both servers, so a comparison of the two compares the servers.
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        loop="uvloop",
        http=header_timeout_protocol(header_timeout_s),
    )


def serve_granian(
    target: str,
    *,
    host: str,
    port: int,
    factory: bool = False,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    interface: str = "asgi",
) -> None:
    """Serve the ASGI app at import path ``target`` (``module:name``; with ``factory``, a
    function returning the app) with granian: one worker process, one I/O thread, HTTP/1."""
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings
    from granian.log import LogLevels

    Granian(
        target,
        address=host,
        port=port,
        interface=Interfaces(interface),
        workers=1,
        runtime_threads=1,
        loop=Loops.uvloop,
        http=HTTPModes.http1,
        factory=factory,
        log_level=LogLevels.warning,
        log_access=False,
        http1_settings=HTTP1Settings(header_read_timeout=int(header_timeout_s * 1000)),
    ).serve()


def settings_to_environment(config: Any) -> str:
    """A ``ProxyConfig`` as the JSON :func:`app_from_environment` reads."""
    fields = dataclasses.asdict(config)
    secret = fields.get("credential_secret")
    fields["credential_secret"] = secret.hex() if secret is not None else None
    return json.dumps(fields)


def rsgi_app_from_environment() -> Any:
    """:func:`app_from_environment` served over RSGI (granian's factory for ``granian-rsgi``)."""
    from services.cache_proxy.rsgi import RsgiAdapter

    app = app_from_environment()
    return RsgiAdapter(app, whole_body_max_bytes=app.config.max_body_bytes)


def app_from_environment() -> Any:
    """The proxy app built from :data:`SETTINGS_ENVIRONMENT_VARIABLE` (granian's factory);
    the variable is removed once read, so processes started later do not inherit the secret."""
    from services.cache_proxy.app import CacheProxy
    from services.cache_proxy.config import ProxyConfig

    log_warnings_to_stderr()
    fields = json.loads(os.environ.pop(SETTINGS_ENVIRONMENT_VARIABLE))
    secret = fields.get("credential_secret")
    fields["credential_secret"] = bytes.fromhex(secret) if secret is not None else None
    return CacheProxy(ProxyConfig(**fields))
