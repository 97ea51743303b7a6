"""The cache proxy against hostile and unusual requests (issue 12), with real processes:
the proxy (``python -m services.cache_proxy``), a real redis-server and the stub upstream
(tests/stub_upstream.py), here started with API keys so it checks credentials like a
hosted API and names, in ``system_fingerprint``, the key each answer was produced for.
Credentials, single-flight, bodies and targets that cannot be keyed, Cache-Control, the
deterministic policy, and a property test over arbitrary JSON and headers. The local
tier's coherence with Redis is in test_cache_proxy_local_tier.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.supervisor import ManagedService
from tests.stub_upstream import credential_of, fingerprint_of_key
from tests.support.integration_proxy import CHAT_PATH, REPO_ROOT, chat, running_proxy, stub_calls, stub_upstream_service

pytestmark = pytest.mark.integration

API_KEYS = ("key-alpha-1234567890", "key-beta-0987654321")
ALPHA, BETA = API_KEYS


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache-proxy-hostile-inputs-logs")


@pytest.fixture(scope="module")
def keyed_stub(log_dir: Path) -> Iterator[ManagedService]:
    with stub_upstream_service(log_dir, "keyed-stub", "--api-keys", ",".join(API_KEYS)) as service:
        yield service


@pytest.fixture(scope="module")
def open_stub(log_dir: Path) -> Iterator[ManagedService]:
    with stub_upstream_service(log_dir, "open-stub") as service:
        yield service


@pytest.fixture(scope="module")
def keyed_proxy(keyed_stub: ManagedService, redis_service, log_dir: Path) -> Iterator[ManagedService]:
    """The default proxy (credentials bypass the cache) before the key-checking stub."""
    with running_proxy(keyed_stub, redis_service.redis_url, log_dir) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def per_credential_proxy(keyed_stub: ManagedService, redis_service, log_dir: Path) -> Iterator[ManagedService]:
    with running_proxy(keyed_stub, redis_service.redis_url, log_dir, "--credentials", "per-credential") as proxy:
        yield proxy


@pytest.fixture(scope="module")
def open_proxy(open_stub: ManagedService, redis_service, log_dir: Path) -> Iterator[ManagedService]:
    with running_proxy(open_stub, redis_service.redis_url, log_dir) as proxy:
        yield proxy


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def fingerprint(response: httpx.Response) -> str | None:
    return response.json().get("system_fingerprint")


# --- credentials --------------------------------------------------------------------------


def test_default_proxy_sends_every_credentialed_request_upstream(keyed_proxy: ManagedService) -> None:
    body = chat(f"credentials bypass {uuid.uuid4()}")
    with httpx.Client(base_url=keyed_proxy.url, timeout=30) as client:
        for _ in range(2):
            alpha = client.post(CHAT_PATH, json=body, headers=bearer(ALPHA))
            assert (alpha.status_code, alpha.headers["x-cache"]) == (200, "BYPASS")
            assert fingerprint(alpha) == fingerprint_of_key(API_KEYS, ALPHA)
        beta = client.post(CHAT_PATH, json=body, headers={"x-api-key": BETA})
        assert (beta.status_code, fingerprint(beta)) == (200, fingerprint_of_key(API_KEYS, BETA))
        for headers in ({}, bearer("wrong-key"), {"api-key": "wrong-key"}):
            refused = client.post(CHAT_PATH, json=body, headers=headers)
            assert refused.status_code == 401, headers
            assert refused.headers["x-cache"] == ("MISS" if not headers else "BYPASS")
        metrics = client.get("/metrics").text
    assert "lab_cache_credential_bypasses_total 5.0" in metrics


def test_per_credential_proxy_never_serves_one_key_to_another(per_credential_proxy: ManagedService) -> None:
    body = chat(f"per credential {uuid.uuid4()}")
    with httpx.Client(base_url=per_credential_proxy.url, timeout=30) as client:
        states = [client.post(CHAT_PATH, json=body, headers=bearer(ALPHA)) for _ in range(2)]
        assert [response.headers["x-cache"] for response in states] == ["MISS", "HIT"]
        assert {fingerprint(response) for response in states} == {fingerprint_of_key(API_KEYS, ALPHA)}
        # Other spellings of a credential are credentials too, each its own entry.
        for headers in ({"x-api-key": BETA}, {"api-key": BETA}, {**bearer(BETA), "cookie": "session=1"}):
            beta = client.post(CHAT_PATH, json=body, headers=headers)
            assert (beta.headers["x-cache"], fingerprint(beta)) == ("MISS", fingerprint_of_key(API_KEYS, BETA))
        for headers in ({}, bearer("wrong-key"), {"proxy-authorization": f"Bearer {ALPHA}"}):
            refused = client.post(CHAT_PATH, json=body, headers=headers)
            assert (refused.status_code, refused.headers["x-cache"]) == (401, "MISS"), headers
        # A query string is part of who is asking (?api-key=...): its own entry.
        query = client.post(CHAT_PATH + "?api-version=1", json=body, headers=bearer(ALPHA))
        assert query.headers["x-cache"] == "MISS"


def test_single_flight_groups_never_span_two_credentials(
    per_credential_proxy: ManagedService, keyed_stub: ManagedService
) -> None:
    body = chat(f"single flight credentials {uuid.uuid4()}")
    slow = {"x-stub-delay-s": "0.5"}

    async def scenario() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=per_credential_proxy.url, timeout=30) as client:
            # A bad key leads, then the valid users, then no key at all, all identical bodies.
            leader = asyncio.ensure_future(client.post(CHAT_PATH, json=body, headers={**slow, **bearer("bad")}))
            await asyncio.sleep(0.1)
            followers = [
                client.post(CHAT_PATH, json=body, headers={**slow, **bearer(key)}) for key in (ALPHA, BETA, ALPHA)
            ] + [client.post(CHAT_PATH, json=body, headers=slow)]
            return [await leader, *await asyncio.gather(*followers)]

    bad, alpha, beta, alpha_again, anonymous = asyncio.run(scenario())
    assert bad.status_code == 401 and anonymous.status_code == 401
    assert (alpha.status_code, fingerprint(alpha)) == (200, fingerprint_of_key(API_KEYS, ALPHA))
    assert (beta.status_code, fingerprint(beta)) == (200, fingerprint_of_key(API_KEYS, BETA))
    assert alpha_again.content == alpha.content  # the same credential did share


# --- single-flight shares only successes -----------------------------------------------------


@pytest.mark.parametrize(
    "leader_headers",
    [{"x-stub-status": "503"}, {"x-stub-status": "429"}, {"x-stub-response-header": "Cache-Control: no-store"}],
    ids=["503", "429", "no-store"],
)
def test_followers_of_a_leader_without_a_storable_answer_ask_upstream(
    open_proxy: ManagedService, open_stub: ManagedService, leader_headers: dict[str, str]
) -> None:
    body = chat(f"failed leader {uuid.uuid4()}")
    slow = {"x-stub-delay-s": "0.4"}

    async def scenario() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=open_proxy.url, timeout=30) as client:
            leader = asyncio.ensure_future(client.post(CHAT_PATH, json=body, headers={**slow, **leader_headers}))
            await asyncio.sleep(0.1)
            followers = await asyncio.gather(*(client.post(CHAT_PATH, json=body) for _ in range(5)))
            return [await leader, *followers]

    calls_before = stub_calls(open_stub)
    leader, *followers = asyncio.run(scenario())
    assert leader.status_code == int(leader_headers.get("x-stub-status", 200))
    assert all(follower.status_code == 200 for follower in followers)
    assert all(follower.content != leader.content for follower in followers)
    assert stub_calls(open_stub) - calls_before >= 2  # the followers went upstream themselves


# --- bodies and targets the proxy cannot key ----------------------------------------------------

UNKEYABLE_BODIES = {
    "NaN": b'{"model": "m", "messages": [], "temperature": NaN}',
    "Infinity": b'{"model": "m", "messages": [], "temperature": Infinity}',
    "-Infinity": b'{"model": "m", "messages": [], "top_p": -Infinity}',
    "1e400": b'{"model": "m", "messages": [], "temperature": 1e400}',
    "lone surrogate": b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}',
    "lone surrogate key": b'{"model": "m", "\\udfff": 1}',
    "repeated key": b'{"model": "m", "messages": [], "model": "other"}',
    "300 deep": b'{"model": "m", "x": ' + b"[" * 300 + b"]" * 300 + b"}",
    "100000 deep": b'{"model": "m", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "huge integer": b'{"model": "m", "max_tokens": ' + b"9" * 5000 + b"}",
    "not an object": b"[1, 2, 3]",
    "not JSON": b"\xff\xfe not json",
}


@pytest.mark.parametrize("raw_body", UNKEYABLE_BODIES.values(), ids=UNKEYABLE_BODIES.keys())
def test_bodies_that_cannot_be_keyed_pass_through_never_500(open_proxy: ManagedService, raw_body: bytes) -> None:
    with httpx.Client(base_url=open_proxy.url, timeout=30) as client:
        for _ in range(2):
            response = client.post(CHAT_PATH, content=raw_body, headers={"content-type": "application/json"})
            assert response.status_code < 500, response.text
            assert response.headers["x-cache"] == "BYPASS"


def _raw_http(url: str, request: bytes) -> bytes:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):  # Connection: close: read to the end
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize(
    "request_line",
    [
        b"OPTIONS * HTTP/1.1",
        b"GET * HTTP/1.1",
        b"POST * HTTP/1.1",
        b"GET //evil.example/x HTTP/1.1",
        b"GET /v1/models%0d%0aX-Injected:%201 HTTP/1.1",
        b"GET /%2e%2e/%2e%2e/etc HTTP/1.1",
    ],
)
def test_odd_request_targets_are_answered_below_500(open_proxy: ManagedService, request_line: bytes) -> None:
    reply = _raw_http(open_proxy.url, request_line + b"\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    status = int(reply.split(b" ", 2)[1])
    assert status < 500, reply[:300]
    if b"*" in request_line:
        assert status == 400 and b"not a path" in reply


# --- Cache-Control and Retry-After ----------------------------------------------------------------


@pytest.mark.parametrize(
    "response_header",
    [
        "Cache-Control: no-store",
        "Cache-Control: private, max-age=60",
        "Cache-Control: max-age=5, No-Store",
        "Set-Cookie: session=abc",
    ],
)
def test_answers_the_upstream_marks_private_are_not_stored(open_proxy: ManagedService, response_header: str) -> None:
    body = chat(f"upstream cache-control {uuid.uuid4()}")
    with httpx.Client(base_url=open_proxy.url, timeout=30) as client:
        first = client.post(CHAT_PATH, json=body, headers={"x-stub-response-header": response_header})
        assert (first.status_code, first.headers["x-cache"]) == (200, "MISS")
        client.cookies.clear()  # else the cookie makes the next request a credentialed one
        second = client.post(CHAT_PATH, json=body)
        assert second.headers["x-cache"] == "MISS" and second.content != first.content
        streamed = chat(f"upstream cache-control stream {uuid.uuid4()}", stream=True)
        client.post(CHAT_PATH, json=streamed, headers={"x-stub-response-header": response_header})
        client.cookies.clear()
        assert client.post(CHAT_PATH, json=streamed).headers["x-cache"] == "MISS"


def test_every_cache_control_request_line_counts(open_proxy: ManagedService) -> None:
    body = chat(f"cache-control lines {uuid.uuid4()}")
    with httpx.Client(base_url=open_proxy.url, timeout=30) as client:
        client.post(CHAT_PATH, json=body)
        several_lines = httpx.Headers([("cache-control", "max-age=0"), ("cache-control", "no-store")])
        assert client.post(CHAT_PATH, json=body, headers=several_lines).headers["x-cache"] == "BYPASS"
        one_list = {"cache-control": "max-age=0, No-Cache"}
        assert client.post(CHAT_PATH, json=body, headers=one_list).headers["x-cache"] == "MISS"


def test_retry_after_is_kept_on_the_plain_path(open_proxy: ManagedService) -> None:
    with httpx.Client(base_url=open_proxy.url, timeout=30) as client:
        limited = client.post(
            CHAT_PATH,
            json=chat(f"rate limited {uuid.uuid4()}"),
            headers={"x-stub-status": "429", "x-stub-response-header": "Retry-After: 7"},
        )
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "7"
    assert limited.headers["x-cache"] == "MISS"
    assert int(limited.headers["content-length"]) == len(limited.content)


# --- the deterministic policy: behaviour and words ---------------------------------------------------


def test_deterministic_policy_does_not_cache_a_missing_temperature_and_says_so(
    open_stub: ManagedService, redis_service, log_dir: Path
) -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "services.cache_proxy", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=True,
    ).stdout
    assert "missing temperature means 1.0" in " ".join(help_text.split())
    with (
        running_proxy(open_stub, redis_service.redis_url, log_dir, "--policy", "deterministic") as proxy,
        httpx.Client(base_url=proxy.url, timeout=30) as client,
    ):
        unset = chat(f"unset temperature {uuid.uuid4()}")
        assert [client.post(CHAT_PATH, json=unset).headers["x-cache"] for _ in range(2)] == ["BYPASS", "BYPASS"]
        greedy = chat(f"temperature zero {uuid.uuid4()}", temperature=0.0)
        assert [client.post(CHAT_PATH, json=greedy).headers["x-cache"] for _ in range(2)] == ["MISS", "HIT"]
        seeded = chat(f"seeded {uuid.uuid4()}", temperature=0.9, seed=3)
        assert [client.post(CHAT_PATH, json=seeded).headers["x-cache"] for _ in range(2)] == ["MISS", "HIT"]


# --- property: arbitrary JSON and headers through the real proxy ---------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=10,
)
request_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"model": st.just("stub-model"), "messages": st.just([{"role": "user", "content": "hi"}])},
        optional={
            "temperature": json_scalars,
            "max_tokens": json_scalars,
            "stream": st.booleans(),
            "seed": json_scalars,
            "n": json_scalars,
            "extra": json_values,
        },
    ),
)
header_names = st.from_regex(r"\A(x-[a-z]{1,8}|cache-control|cookie|authorization|api-key|x-api-key|pragma)\Z")
header_values = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20).map(str.strip)
credentials = st.sampled_from([None, ALPHA, BETA, "wrong-key"])
credential_spellings = st.sampled_from(["authorization", "api-key", "x-api-key"])


def _credential_headers(key: str | None, spelling: str) -> dict[str, str]:
    if key is None:
        return {}
    return bearer(key) if spelling == "authorization" else {spelling: key}


def _check_answer(response: httpx.Response, sent_headers: dict[str, str]) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:300])
    key = credential_of(httpx.Headers(sent_headers))
    if response.status_code != 200:
        return
    assert key in API_KEYS, (sent_headers, response.text[:200])  # nobody else gets an answer
    expected = fingerprint_of_key(API_KEYS, key)
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        assert f'"system_fingerprint": "{expected}"'.encode() in response.content, response.content[:300]
    else:
        assert response.json().get("system_fingerprint") == expected, response.text[:300]


@pytest.mark.parametrize("mode", ["bypass", "per-credential"])
def test_property_no_5xx_and_no_answer_for_another_credential(
    mode: str, keyed_proxy: ManagedService, per_credential_proxy: ManagedService
) -> None:
    proxy = keyed_proxy if mode == "bypass" else per_credential_proxy
    client = httpx.Client(base_url=proxy.url, timeout=30)

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        body=request_bodies,
        raw_variant=st.booleans(),
        headers=st.dictionaries(header_names, header_values, max_size=3),
        first=credentials,
        second=credentials,
        spelling=credential_spellings,
    )
    def check(
        body: object, raw_variant: bool, headers: dict[str, str], first: str | None, second: str | None, spelling: str
    ) -> None:
        # NaN and Infinity go out as Python writes them (not JSON), a second time re-spaced.
        content = json.dumps(body, indent=1 if raw_variant else None).encode()
        plain_headers = {
            name: value for name, value in headers.items() if name not in ("authorization", "api-key", "x-api-key")
        }
        for key in (first, second, first):
            sent = {**plain_headers, **_credential_headers(key, spelling), "content-type": "application/json"}
            _check_answer(client.post(CHAT_PATH, content=content, headers=sent), sent)

    try:
        check()
    finally:
        client.close()
