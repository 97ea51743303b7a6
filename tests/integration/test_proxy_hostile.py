"""The cache proxy under hostile clients (issue 25, items 5-8), with real processes: the
proxy (``python -m services.cache_proxy``, under uvicorn and under granian), a real
redis-server and the stub upstream (tests/stub_upstream.py), which counts the words it
generates and the generations it stopped because its client left; one test uses the real
naive server.

- a client that leaves takes its upstream call with it (a single-flight call when its
  last waiter leaves);
- bodies over the limit get 413 without being read; a 25 MB body keyed meanwhile leaves
  other clients' hits fast;
- headers and bodies sent slowly (slow-loris) are cut off;
- stored values that cannot be served (garbage, the wrong kind, another Redis type) are
  misses and are replaced, and do not open the circuit breaker.
"""

from __future__ import annotations

import json
import re
import select
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from services.cache_proxy.keys import cache_key, normalize_upstream_identity
from services.cache_proxy.serving import DEFAULT_HEADER_TIMEOUT_S, SERVERS
from services.supervisor import ManagedService
from tests.support.integration_proxy import CHAT_PATH, REPO_ROOT, chat

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy-hostile-logs")


@pytest.fixture(scope="module")
def stub(log_dir: Path) -> Iterator[ManagedService]:
    service = ManagedService(
        name="hostile-stub",
        argv=[sys.executable, "-m", "tests.stub_upstream", "--port", "{port}"],
        log_path=log_dir / "stub.log",
        readiness_timeout_s=30.0,
        cwd=REPO_ROOT,
    )
    with service:
        yield service


def start_proxy(upstream_url: str, redis_url: str, log_dir: Path, *extra_args: str) -> tuple[ManagedService, str]:
    """A proxy process with its own namespace; returns it and the namespace."""
    namespace = f"hostile-{uuid.uuid4().hex[:8]}"
    service = ManagedService(
        name=f"cache-proxy-{namespace}",
        argv=[
            sys.executable,
            "-m",
            "services.cache_proxy",
            "--upstream",
            upstream_url,
            "--redis-url",
            redis_url,
            "--port",
            "{port}",
            "--namespace",
            namespace,
            *extra_args,
        ],
        log_path=log_dir / f"cache-proxy-{namespace}.log",
        readiness_timeout_s=30.0,
        cwd=REPO_ROOT,
    )
    return service.start(), namespace


@pytest.fixture(scope="module", params=SERVERS)
def proxy(
    request: pytest.FixtureRequest, stub: ManagedService, redis_service, log_dir: Path
) -> Iterator[ManagedService]:
    """The proxy with its default settings, under each server."""
    service, _ = start_proxy(stub.url, redis_service.redis_url, log_dir, "--server", request.param)
    try:
        yield service
    finally:
        service.stop()


def stub_counts(stub: ManagedService) -> dict[str, int]:
    return httpx.get(f"{stub.url}/stub/calls", timeout=5).json()


def host_port(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def raw_request(body: bytes, headers: dict[str, str] | None = None, *, content_length: int | None = None) -> bytes:
    lines = [
        f"POST {CHAT_PATH} HTTP/1.1",
        "Host: proxy",
        "Content-Type: application/json",
        f"Content-Length: {len(body) if content_length is None else content_length}",
    ]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def send_and_leave(url: str, body: dict, headers: dict[str, str], *, after_s: float) -> None:
    """Send a request, read nothing, and close the connection after ``after_s``."""
    with socket.create_connection(host_port(url), timeout=5) as sock:
        sock.sendall(raw_request(json.dumps(body).encode(), headers))
        time.sleep(after_s)


def long_chat(**fields: object) -> dict:
    """A request the stub answers with about 200 words."""
    return chat(f"leave early {uuid.uuid4()} " + "word " * 200, max_tokens=400, **fields)


# --- a client that leaves takes its upstream call with it -------------------------------------

SLOW_WORDS = {
    "plain": ({"x-stub-word-delay-s": "0.02"}, {}),
    "stream": ({"x-stub-chunk-delay-s": "0.02"}, {"stream": True}),
}


@pytest.mark.parametrize("kind", SLOW_WORDS)
def test_a_client_leaving_stops_the_upstream_generation_within_a_second(
    proxy: ManagedService, stub: ManagedService, kind: str
) -> None:
    headers, fields = SLOW_WORDS[kind]
    figures = {}
    for target in (stub.url, proxy.url):  # directly, then through the proxy
        httpx.post(f"{stub.url}/stub/reset")
        send_and_leave(target, long_chat(**fields), headers, after_s=0.5)
        time.sleep(1.0)
        one_second_after = stub_counts(stub)
        time.sleep(1.0)
        two_seconds_after = stub_counts(stub)
        figures[target] = (one_second_after["tokens"], two_seconds_after["tokens"])
        assert one_second_after["tokens"] == two_seconds_after["tokens"], (target, figures)
        assert one_second_after["abandoned"] == 1 and one_second_after["tokens"] < 90, (target, one_second_after)
    print(
        f"words generated after a client left at 0.5 s ({kind}): direct {figures[stub.url]}, "
        f"through the proxy {figures[proxy.url]}"
    )


def test_a_single_flight_call_ends_only_when_its_last_waiter_leaves(
    proxy: ManagedService, stub: ManagedService
) -> None:
    headers = {"x-stub-word-delay-s": "0.01"}
    body = long_chat()
    httpx.post(f"{stub.url}/stub/reset")
    leader = threading.Thread(target=send_and_leave, args=(proxy.url, body, headers), kwargs={"after_s": 0.5})
    leader.start()
    time.sleep(0.2)
    follower = httpx.post(f"{proxy.url}{CHAT_PATH}", json=body, headers=headers, timeout=30)
    leader.join()
    assert (follower.status_code, follower.headers["x-cache"]) == (200, "MISS")
    counts = stub_counts(stub)
    assert (counts["completions"], counts["abandoned"]) == (1, 0)  # one call, finished for the follower
    # Both leave: the call ends.
    body = long_chat()
    httpx.post(f"{stub.url}/stub/reset")
    waiters = [
        threading.Thread(target=send_and_leave, args=(proxy.url, body, headers), kwargs={"after_s": after_s})
        for after_s in (0.5, 0.8)
    ]
    for waiter in waiters:
        waiter.start()
        time.sleep(0.1)
    for waiter in waiters:
        waiter.join()
    time.sleep(1.0)
    counts = stub_counts(stub)
    assert (counts["completions"], counts["abandoned"]) == (1, 1)
    assert counts["tokens"] == stub_counts(stub)["tokens"]


def naive_metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    match = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE)
    assert match, f"the naive server exports {name}"
    return float(match.group(1))


def test_a_client_leaving_through_the_proxy_stops_the_naive_server(naive_service, redis_service, log_dir: Path) -> None:
    service, _ = start_proxy(naive_service.url, redis_service.redis_url, log_dir)
    try:
        model = httpx.get(f"{naive_service.url}/v1/models", timeout=10).json()["data"][0]["id"]
        warm_up = {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
        assert httpx.post(f"{naive_service.url}{CHAT_PATH}", json=warm_up, timeout=120).status_code == 200
        figures = {}
        for name, target in (("direct", naive_service.url), ("through the proxy", service.url)):
            body = {
                "model": model,
                "max_tokens": 600,
                "temperature": 0,
                "messages": [
                    {"role": "user", "content": f"Count from 1 to 1000, one number per line. ({uuid.uuid4()})"}
                ],
            }
            before = naive_metric(naive_service.url, "vllm:generation_tokens_total")
            send_and_leave(target, body, {}, after_s=0.5)
            time.sleep(1.0)
            running = naive_metric(naive_service.url, "vllm:num_requests_running")
            time.sleep(1.5)
            figures[name] = (running, naive_metric(naive_service.url, "vllm:generation_tokens_total") - before)
        print(f"naive server, a client leaving at 0.5 s: (requests running 1 s later, tokens generated): {figures}")
        # Through the proxy the naive server does no more than when its client calls it directly
        # (before the fix: 263 tokens against 15). The stub tests above time the stop itself.
        assert figures["through the proxy"][0] <= figures["direct"][0], figures
        assert figures["through the proxy"][1] <= figures["direct"][1] + 30, figures
    finally:
        service.stop()


# --- large bodies ------------------------------------------------------------------------------


def read_head(sock: socket.socket, timeout_s: float = 5.0) -> bytes:
    """The response's status line and headers (the connection may stay open after them)."""
    sock.settimeout(timeout_s)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def test_bodies_over_the_limit_get_413_without_being_read(proxy: ManagedService) -> None:
    # 100 MB declared, 10 bytes sent: answered at once.
    with socket.create_connection(host_port(proxy.url), timeout=5) as sock:
        started_at = time.perf_counter()
        sock.sendall(raw_request(b"0123456789", content_length=100_000_000))
        reply = read_head(sock, timeout_s=3)
        assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
        assert time.perf_counter() - started_at < 2
    with httpx.Client(base_url=proxy.url, timeout=30) as client:
        over = client.post(CHAT_PATH, content=b" " * (9 * 1024 * 1024), headers={"content-type": "application/json"})
        assert over.status_code == 413 and "limit" in over.json()["error"]["message"]
        chunked = client.post(
            CHAT_PATH, content=iter([b" " * (1024 * 1024)] * 10), headers={"content-type": "application/json"}
        )
        assert chunked.status_code == 413
        under = client.post(CHAT_PATH, json=chat("x" * 1_000_000))
        assert under.status_code == 200 and under.headers["x-cache"] in ("MISS", "HIT")
        assert client.get("/health").status_code == 200
        assert re.search(r"^lab_cache_refused_bodies_total [3-9]", client.get("/metrics").text, re.MULTILINE)


def hits_while(proxy_url: str, body: dict, running: threading.Event, latencies: list[float], states: set[str]) -> None:
    """Sequential requests for ``body`` until ``running`` clears: their latencies in seconds
    and the ``X-Cache`` values seen."""
    with httpx.Client(base_url=proxy_url, timeout=30) as client:
        while running.is_set():
            started_at = time.perf_counter()
            response = client.post(CHAT_PATH, json=body)
            latencies.append(time.perf_counter() - started_at)
            states.add(response.headers.get("x-cache", str(response.status_code)))


@pytest.mark.timing
def test_a_25_mb_body_leaves_other_clients_hits_under_50_ms_p99(
    stub: ManagedService, redis_service, log_dir: Path, tmp_path: Path
) -> None:
    service, _ = start_proxy(stub.url, redis_service.redis_url, log_dir, "--max-body-bytes", str(64 * 1024 * 1024))
    try:
        hit = chat(f"hit while a large body is keyed {uuid.uuid4()}")
        assert httpx.post(f"{service.url}{CHAT_PATH}", json=hit, timeout=30).headers["x-cache"] == "MISS"
        large = tmp_path / "large.json"
        numbers = (b"1," * 12_500_000)[:-1]
        large.write_bytes(
            b'{"model": "stub-model", "max_tokens": 4, "messages": [{"role": "user", "content": "big"}],'
            b' "x": [' + numbers + b"]}"
        )
        running = threading.Event()
        running.set()
        latencies: list[float] = []
        states: set[str] = set()
        measuring = threading.Thread(target=hits_while, args=(service.url, hit, running, latencies, states))
        measuring.start()
        time.sleep(0.5)
        started_at = time.perf_counter()
        posted = subprocess.run(
            [
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-D",
                "-",
                "-H",
                "content-type: application/json",
                "-H",
                "Expect:",
                "--data-binary",
                f"@{large}",
                f"{service.url}{CHAT_PATH}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        large_s = time.perf_counter() - started_at
        time.sleep(0.2)
        running.clear()
        measuring.join()
        assert posted.stdout.startswith("HTTP/1.1 200"), posted.stdout[:300]
        assert "x-cache: miss" in posted.stdout.lower()  # keyed (in the worker process), not passed through
        assert states == {"HIT"}
        latencies.sort()
        p99_ms = latencies[int(len(latencies) * 0.99)] * 1000
        print(
            f"25 MB body answered in {large_s:.1f} s; meanwhile {len(latencies)} hits, p50 "
            f"{latencies[len(latencies) // 2] * 1000:.1f} ms, p99 {p99_ms:.1f} ms, max {latencies[-1] * 1000:.1f} ms"
        )
        assert len(latencies) > 100 and p99_ms < 50
    finally:
        service.stop()


# --- slow clients ------------------------------------------------------------------------------


def open_slow_connections(url: str) -> dict[str, list[socket.socket]]:
    """200 connections sending their headers a byte a second, 20 silent ones, and 20 sending
    a body a byte a second."""
    groups: dict[str, list[socket.socket]] = {"headers": [], "silent": [], "body": []}
    for group, count, first_bytes in (
        ("headers", 200, f"POST {CHAT_PATH} HTTP/1.1\r\nHost: x\r\n".encode()),
        ("silent", 20, b""),
        ("body", 20, raw_request(b"{", content_length=1000)),
    ):
        for _ in range(count):
            sock = socket.create_connection(host_port(url), timeout=5)
            sock.sendall(first_bytes)
            sock.setblocking(False)
            groups[group].append(sock)
    return groups


def still_open(sock: socket.socket, trickle: bytes) -> bool:
    """False once the proxy closed ``sock`` (its answer, if any, read and dropped)."""
    try:
        while select.select([sock], [], [], 0)[0]:
            if not sock.recv(65536):
                return False
        if trickle:
            sock.send(trickle)
    except OSError:
        return False
    return True


def test_slow_headers_and_bodies_are_cut_off(proxy: ManagedService) -> None:
    groups = open_slow_connections(proxy.url)
    trickles = {"headers": b"X", "silent": b"", "body": b" "}
    closed_after_s: dict[str, float] = {}
    started_at = time.perf_counter()
    open_now = {group: list(sockets) for group, sockets in groups.items()}
    while time.perf_counter() - started_at < 16 and any(open_now.values()):
        time.sleep(1.0)
        for group, sockets in open_now.items():
            open_now[group] = [sock for sock in sockets if still_open(sock, trickles[group])]
            if not open_now[group] and group not in closed_after_s:
                closed_after_s[group] = time.perf_counter() - started_at
        assert httpx.get(f"{proxy.url}/health", timeout=5).status_code in (200, 503)  # still serving others
    for sockets in groups.values():
        for sock in sockets:
            sock.close()
    print(
        f"slow connections all closed after (s): {closed_after_s}; still open: "
        f"{ {group: len(sockets) for group, sockets in open_now.items()} }"
    )
    assert not any(open_now.values())
    assert closed_after_s["headers"] <= DEFAULT_HEADER_TIMEOUT_S + 3
    assert closed_after_s["body"] <= 14


# --- stored values that cannot be served ------------------------------------------------------------


@pytest.fixture(scope="module", params=SERVERS)
def keyed_proxy(
    request: pytest.FixtureRequest, stub: ManagedService, redis_service, log_dir: Path
) -> Iterator[tuple[ManagedService, str]]:
    service, namespace = start_proxy(stub.url, redis_service.redis_url, log_dir, "--server", request.param)
    try:
        yield service, namespace
    finally:
        service.stop()


def key_of(stub: ManagedService, namespace: str, body: dict) -> str:
    return cache_key(
        upstream_identity=normalize_upstream_identity(stub.url), path=CHAT_PATH, body=body, namespace=namespace
    )


STREAM_ANSWER = (
    b'data: {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
)
BAD_VALUES = {
    "garbage": (False, b"\x00\xff\xfe garbage"),
    "unknown tag": (False, b'x{"choices": [{"message": {"content": "x"}}]}'),
    "truncated JSON": (False, b'j{"choices": [{"message": {"con'),
    "no choices": (False, b'j{"choices": []}'),
    "empty": (False, b""),
    "a stream for a plain request": (False, b"s" + STREAM_ANSWER),
    "a plain answer for a stream request": (True, b'j{"choices": [{"message": {"content": "x"}}]}'),
    "an unfinished stream": (True, b"s" + STREAM_ANSWER.replace(b"data: [DONE]\n\n", b"")),
}


@pytest.mark.parametrize("case", BAD_VALUES)
def test_corrupted_entries_are_served_as_misses_and_repaired(
    keyed_proxy: tuple[ManagedService, str], stub: ManagedService, redis_service, case: str
) -> None:
    service, namespace = keyed_proxy
    streaming, bad_value = BAD_VALUES[case]
    body = chat(f"corrupted {case} {uuid.uuid4()}", **({"stream": True} if streaming else {}))
    store = redis.Redis.from_url(redis_service.redis_url)
    store.set(key_of(stub, namespace, body), bad_value)
    with httpx.Client(base_url=service.url, timeout=30) as client:
        first, second = (client.post(CHAT_PATH, json=body) for _ in range(2))
    assert (first.status_code, first.headers["x-cache"]) == (200, "MISS"), first.content[:200]
    assert (second.headers["x-cache"], second.content) == ("HIT", first.content)
    stored = store.get(key_of(stub, namespace, body))
    assert isinstance(stored, bytes) and stored[:1] == (b"s" if streaming else b"j")


@pytest.mark.parametrize("redis_type", ["list", "hash", "set"])
def test_a_key_of_another_redis_type_is_a_repaired_miss_not_an_outage(
    keyed_proxy: tuple[ManagedService, str], stub: ManagedService, redis_service, redis_type: str
) -> None:
    service, namespace = keyed_proxy
    body, other = chat(f"wrongtype {uuid.uuid4()}"), chat(f"an ordinary prompt {uuid.uuid4()}")
    store = redis.Redis.from_url(redis_service.redis_url)
    key = key_of(stub, namespace, body)
    {
        "list": lambda: store.rpush(key, "x"),
        "hash": lambda: store.hset(key, "f", "v"),
        "set": lambda: store.sadd(key, "x"),
    }[redis_type]()
    with httpx.Client(base_url=service.url, timeout=30) as client:
        errors_before = _metric(client, "lab_cache_errors_total")
        assert client.post(CHAT_PATH, json=other).headers["x-cache"] == "MISS"
        states = [client.post(CHAT_PATH, json=body).headers["x-cache"] for _ in range(6)]
        assert states == ["MISS"] + ["HIT"] * 5
        assert client.post(CHAT_PATH, json=other).headers["x-cache"] == "HIT"
        assert client.get("/health").json()["redis"]["circuit"] == "closed"
        assert _metric(client, "lab_cache_errors_total") == errors_before
        assert _metric(client, "lab_cache_bad_entries_total") >= 1
    assert store.type(key) == b"string"


def _metric(client: httpx.Client, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", client.get("/metrics").text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0
