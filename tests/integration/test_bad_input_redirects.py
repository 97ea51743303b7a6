"""No redirect is followed by k6: a target that answers 302 must not send the load elsewhere.

The target URL check (lab.user_input.validation) holds when it runs; a redirect (or a host name that
later resolves elsewhere) could still move the load to a host nobody allowed. So the
load tool itself must refuse redirects (k6 option ``maxRedirects: 0``).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lab.run.k6_driver import K6Process, script_path

pytestmark = pytest.mark.integration


def serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_k6_never_follows_a_redirect_to_another_host(tmp_path: Path) -> None:
    elsewhere_hits: list[str] = []

    class Elsewhere(BaseHTTPRequestHandler):  # where a redirect would send the load
        def do_GET(self) -> None:
            elsewhere_hits.append(self.path)
            self.send_response(200)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    elsewhere = serve(Elsewhere)

    class Redirecting(BaseHTTPRequestHandler):  # a healthy target that redirects every completion
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{elsewhere.server_port}/v1/chat/completions")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    target = serve(Redirecting)
    try:
        k6 = K6Process(
            script=script_path("number-story"),
            env={
                "TARGET": f"http://127.0.0.1:{target.server_port}",
                "MODEL": "m",
                "VUS": "1",
                "DURATION": "2s",
                "GRACEFUL_STOP": "1s",
                "REQUEST_TIMEOUT": "5s",
            },
            summary_path=tmp_path / "summary.json",
            ndjson_path=tmp_path / "k6.ndjson",
            log_path=tmp_path / "k6.log",
        )
        k6.start()
        k6.wait(timeout_s=60)
    finally:
        target.shutdown()
        elsewhere.shutdown()
    assert (tmp_path / "summary.json").is_file()  # k6 ran and sent its requests
    assert elsewhere_hits == []
