"""Why nothing is cached, said (issue 56, item 4): every bypass counted under its reason in
``/metrics``, and the first credential bypass told once in the log with the setting that caches
such requests. The proxy app runs in process against an in-memory upstream; no Redis is reached
(a bypass never asks it)."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.cache_proxy.app import CacheProxy
from services.cache_proxy.config import ProxyConfig
from services.cache_proxy.policy import BypassReason

ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
SECRET_KEY = "sk-do-not-log-me"


def proxy(**settings: object) -> CacheProxy:
    """A proxy whose upstream is in memory and whose Redis is never opened."""
    config = ProxyConfig(upstream_url="http://upstream", redis_url="redis://127.0.0.1:1/0", **settings)  # type: ignore[arg-type]  # the tests pass each setting by its name
    app = CacheProxy(config)
    app.http = app.flights.http = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json=ANSWER))
    )
    return app


def send_all(app: CacheProxy, requests: list[tuple[bytes, dict[str, str]]]) -> tuple[list[str], dict[str, float]]:
    """POST each (body, headers) to the chat path; the X-Cache values and the bypass counts by reason."""

    async def scenario() -> tuple[list[str], str]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            states = []
            for body, headers in requests:
                response = await client.post("/v1/chat/completions", content=body, headers=headers)
                assert response.status_code == 200, response.text
                states.append(response.headers["x-cache"])
            return states, (await client.get("/metrics")).text

    states, metrics = asyncio.run(scenario())
    by_reason = {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "lab_cache_bypasses_total"
    }
    return states, by_reason


def test_credential_bypasses_are_counted_and_told_once_with_the_setting(caplog: pytest.LogCaptureFixture) -> None:
    body = json.dumps(CHAT).encode()
    sdk_headers = {"authorization": f"Bearer {SECRET_KEY}", "content-type": "application/json"}
    with caplog.at_level(logging.WARNING, logger="services.cache_proxy"):
        states, by_reason = send_all(proxy(), [(body, sdk_headers)] * 3 + [(body, {"x-api-key": SECRET_KEY})])
    assert states == ["BYPASS"] * 4
    assert by_reason == {reason.value: (4.0 if reason is BypassReason.CREDENTIALS else 0.0) for reason in BypassReason}
    told = [record.getMessage() for record in caplog.records if "credentials" in record.getMessage()]
    assert len(told) == 1, told
    assert "(authorization)" in told[0] and "--credentials per-credential" in told[0]
    assert SECRET_KEY not in caplog.text


def test_every_other_bypass_is_counted_under_its_own_reason(caplog: pytest.LogCaptureFixture) -> None:
    body = json.dumps(CHAT).encode()
    requests = [
        (body, {"cache-control": "no-store"}),
        (body, {}),  # a sampled request (no temperature) under --policy deterministic
        (b"[1, 2]", {}),  # not a JSON object: cannot be keyed
        (b'{"a": 1, "a": 2}', {}),  # repeated keys
    ]
    with caplog.at_level(logging.WARNING, logger="services.cache_proxy"):
        states, by_reason = send_all(proxy(policy="deterministic"), requests)
        off_states, off_by_reason = send_all(proxy(cache=False), [(body, {"authorization": "Bearer x"})])
    assert states == ["BYPASS"] * 4 and off_states == ["BYPASS"]
    assert by_reason == {"credentials": 0, "no_store": 1, "policy": 1, "unkeyable_body": 2, "cache_off": 0}
    assert off_by_reason == {"credentials": 0, "no_store": 0, "policy": 0, "unkeyable_body": 0, "cache_off": 1}
    assert not caplog.records  # nothing to tell: no credential was bypassed by the policy
