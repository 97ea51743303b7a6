"""The launch check asks the Hub whether an unknown model id exists (lab.user_input.validation),
against a local fake Hub on a loopback port (HF_ENDPOINT), never the real internet."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lab.user_input import validation
from lab.user_input.validation import ModelNameError, ask_hub, check_model_on_machine

KNOWN = "org/known-model"


class FakeHub(BaseHTTPRequestHandler):
    """``/api/models/org/known-model`` answers 200, any other model 401 (as the Hub does)."""

    def do_GET(self) -> None:
        found = self.path == f"/api/models/{KNOWN}"
        self.send_response(200 if found else 401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"id": "org/known-model"}' if found else b'{"error": "Repository not found"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(validation, "_hub_answers", {})
    yield url
    server.shutdown()
    server.server_close()


@pytest.mark.integration  # a loopback HTTP server stands in for the Hub
def test_a_model_the_hub_knows_is_accepted(fake_hub: str) -> None:
    assert ask_hub(KNOWN) == "found"
    check_model_on_machine(KNOWN, offline=False)


@pytest.mark.integration  # a loopback HTTP server stands in for the Hub
def test_a_model_the_hub_does_not_know_is_refused_at_launch(fake_hub: str) -> None:
    with pytest.raises(ModelNameError, match="has no model of that name"):
        check_model_on_machine("org/no-such-model", offline=False)


@pytest.mark.integration  # a loopback socket that accepts and never answers
def test_a_hub_that_does_not_answer_refuses_within_the_timeout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import socket
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never answers
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(validation, "_hub_answers", {})
    started = time.monotonic()
    try:
        with pytest.raises(ModelNameError, match="did not answer within"):
            check_model_on_machine("org/any-model", offline=False)
    finally:
        silent.close()
    assert time.monotonic() - started < validation.HUB_TIMEOUT_S * 3


def test_a_local_folder_never_asks_the_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validation, "ask_hub", lambda model, **_: pytest.fail("asked the Hub"))
    check_model_on_machine(str(tmp_path), offline=False)
