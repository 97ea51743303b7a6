"""Unit tests of the canonical cache key (services/cache_proxy/keys.py)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.cache_proxy.keys import (
    KEY_FORMAT_VERSION,
    MAX_KEYABLE_NESTING_DEPTH,
    UnkeyableBody,
    cache_key,
    canonical_json,
    is_credential_header,
    is_deterministic_request,
    key_prefix,
    normalize_upstream_identity,
    parse_keyable_body,
    requester_fingerprint,
)

UPSTREAM = "http://127.0.0.1:8000"
PATH = "/v1/chat/completions"

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
request_bodies = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["smollm", "qwen3-0.6b", "other"]),
        "messages": st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "system", "assistant"]), "content": st.text(max_size=40)}
            ),
            min_size=1,
            max_size=3,
        ),
    },
    optional={
        "max_tokens": st.integers(1, 4096),
        "temperature": st.floats(0, 2, allow_nan=False),
        "seed": st.integers(0, 2**31),
        "stop": st.lists(st.text(max_size=5), max_size=2),
        "tools": json_values,
        "response_format": json_values,
    },
)


def key_of(body: dict, **overrides: str) -> str:
    arguments = {"upstream_identity": UPSTREAM, "path": PATH, "namespace": "lab", **overrides}
    return cache_key(body=body, **arguments)


def shuffled(value: object, rng: random.Random) -> object:
    """The same JSON value with every object's keys in a random order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    return value


@settings(max_examples=200, deadline=None)
@given(body=request_bodies, order_seed=st.integers(0, 2**32), indent=st.sampled_from([None, 1, 4]))
def test_key_order_and_whitespace_variants_share_a_key(body: dict, order_seed: int, indent: int | None) -> None:
    variant_text = json.dumps(shuffled(body, random.Random(order_seed)), indent=indent, separators=None)
    assert key_of(json.loads(variant_text)) == key_of(body)


@settings(max_examples=200, deadline=None)
@given(body=request_bodies, other_model=st.text(min_size=1, max_size=12))
def test_a_different_model_never_shares_a_key(body: dict, other_model: str) -> None:
    if other_model == body["model"]:
        return
    assert key_of({**body, "model": other_model}) != key_of(body)


@settings(max_examples=200, deadline=None)
@given(body=request_bodies, max_tokens=st.integers(1, 8192))
def test_a_different_max_tokens_never_shares_a_key(body: dict, max_tokens: int) -> None:
    if body.get("max_tokens") == max_tokens:
        return
    assert key_of({**body, "max_tokens": max_tokens}) != key_of(body)


@settings(max_examples=100, deadline=None)
@given(body=request_bodies)
def test_upstream_path_and_namespace_are_part_of_the_key(body: dict) -> None:
    base = key_of(body)
    assert key_of(body, upstream_identity="http://127.0.0.1:9000") != base
    assert key_of(body, path="/v1/completions") != base
    assert key_of(body, namespace="other") != base


def test_answer_changing_fields_change_the_key() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    variants: list[dict[str, Any]] = [
        {"temperature": 0},
        {"top_p": 0.5},
        {"seed": 1},
        {"stop": ["\n"]},
        {"n": 2},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"response_format": {"type": "json_object"}},
        {"stream": True},
        {"messages": [{"role": "user", "content": "hi!"}]},
    ]
    keys = {key_of(body)} | {key_of({**body, **variant}) for variant in variants}
    assert len(keys) == len(variants) + 1


def test_user_field_does_not_change_the_key_and_equal_numbers_are_equal() -> None:
    body = {"model": "m", "messages": [], "temperature": 0.0, "max_tokens": 16}
    assert key_of({**body, "user": "alice"}) == key_of(body)
    assert key_of({**body, "temperature": 0}) == key_of(body)
    assert key_of({**body, "max_tokens": 16.0}) == key_of(body)


def test_key_layout_is_versioned_and_namespaced() -> None:
    key = key_of({"model": "m"}, namespace="grp")
    assert key.startswith(key_prefix("grp"))
    assert f"v{KEY_FORMAT_VERSION}" in key
    assert len(key.rsplit(":", 1)[1]) == 64


def test_canonical_json_is_sorted_and_compact() -> None:
    assert canonical_json({"b": 1, "a": [1.0, {"d": 2, "c": 3}]}) == '{"a":[1,{"c":3,"d":2}],"b":1}'


def test_upstream_identity_ignores_trailing_slash_and_host_case() -> None:
    assert normalize_upstream_identity("HTTP://LocalHost:8000/") == "http://localhost:8000"


def test_deterministic_means_temperature_zero_or_seed_and_one_choice() -> None:
    assert is_deterministic_request({"temperature": 0})
    assert is_deterministic_request({"temperature": 0.0, "n": 1})
    assert is_deterministic_request({"seed": 7, "temperature": 0.9})
    assert not is_deterministic_request({})  # vLLM and the naive server sample at 1.0
    assert not is_deterministic_request({"temperature": None})
    assert not is_deterministic_request({"temperature": 0.7})
    assert not is_deterministic_request({"temperature": 0, "n": 3})
    assert not is_deterministic_request({"seed": 1, "n": 2})


def test_deterministic_counts_only_numbers_and_integer_seeds() -> None:
    assert not is_deterministic_request({"temperature": "0"})
    assert not is_deterministic_request({"temperature": False})
    assert not is_deterministic_request({"temperature": 10**400})  # no OverflowError
    assert not is_deterministic_request({"seed": "7"})
    assert not is_deterministic_request({"seed": True})
    assert not is_deterministic_request({"temperature": 0, "n": "1"})
    assert is_deterministic_request({"temperature": 0, "n": 1.0})


@pytest.mark.parametrize(
    ("raw_body", "reason"),
    [
        (b'{"temperature": NaN}', "not JSON"),
        (b'{"temperature": Infinity}', "not JSON"),
        (b'{"temperature": -Infinity}', "not JSON"),
        (b'{"temperature": 1e400}', "overflows"),
        (b'{"model": "a", "model": "b"}', "repeats"),
        (b'{"a": {"x": 1, "x": 1}}', "repeats"),
        (b'{"x": ' + b"[" * (MAX_KEYABLE_NESTING_DEPTH + 1) + b"]" * (MAX_KEYABLE_NESTING_DEPTH + 1) + b"}", "deep"),
        (b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "deep"),
        (b'{"n": ' + b"9" * 5000 + b"}", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b"\xff", "not JSON"),
    ],
)
def test_unkeyable_bodies_raise_with_a_reason(raw_body: bytes, reason: str) -> None:
    with pytest.raises(UnkeyableBody, match=reason):
        parse_keyable_body(raw_body)


def test_lone_surrogates_parse_but_cannot_be_keyed() -> None:
    for raw_body in (b'{"content": "\\ud800"}', b'{"\\udfff": 1}'):
        body = parse_keyable_body(raw_body)
        with pytest.raises(UnkeyableBody, match="surrogate"):
            key_of(body)


def test_keyable_bodies_parse_normally() -> None:
    assert parse_keyable_body(b'{"a": [1, 2.5, {"b": null}], "c": "\\u00e9"}') == {
        "a": [1, 2.5, {"b": None}],
        "c": "\u00e9",
    }
    nested = b'{"x": ' + b"[" * (MAX_KEYABLE_NESTING_DEPTH - 1) + b"]" * (MAX_KEYABLE_NESTING_DEPTH - 1) + b"}"
    assert parse_keyable_body(nested)


@pytest.mark.parametrize(
    "name",
    [
        b"authorization",
        b"proxy-authorization",
        b"cookie",
        b"api-key",
        b"x-api-key",
        b"x-goog-api-key",
        b"openai-organization",
        b"x-auth-token",
        b"x-session-id",
        b"x-amz-security-token",
        b"x-client-secret",
        b"x-forwarded-user",
        b"ocp-apim-subscription-key",
    ],
)
def test_credential_headers_are_recognised_as_a_class(name: bytes) -> None:
    assert is_credential_header(name)


@pytest.mark.parametrize(
    "name", [b"content-type", b"user-agent", b"accept", b"cache-control", b"host", b"x-request-id"]
)
def test_ordinary_headers_are_not_credentials(name: bytes) -> None:
    assert not is_credential_header(name)


def test_requester_fingerprint_is_a_keyed_hash_per_credential() -> None:
    secret = b"s" * 32
    plain = [(b"content-type", b"application/json"), (b"user-agent", b"k6")]
    assert requester_fingerprint(plain, b"", secret=secret) is None
    alpha = requester_fingerprint([*plain, (b"authorization", b"Bearer alpha-123")], b"", secret=secret)
    beta = requester_fingerprint([*plain, (b"authorization", b"Bearer beta-456")], b"", secret=secret)
    assert alpha and beta and alpha != beta
    assert "alpha" not in alpha
    assert requester_fingerprint([(b"authorization", b"Bearer alpha-123")], b"", secret=b"t" * 32) != alpha
    # The same credentials in another order or beside other headers: the same requester.
    both = [(b"cookie", b"a=1"), (b"x-api-key", b"k")]
    assert requester_fingerprint(both, b"", secret=secret) == requester_fingerprint(
        [*reversed(both), (b"accept", b"*/*")], b"", secret=secret
    )
    # A credential moved between headers or into the query string is another requester.
    assert requester_fingerprint([(b"api-key", b"k")], b"", secret=secret) != requester_fingerprint(
        [(b"x-api-key", b"k")], b"", secret=secret
    )
    assert requester_fingerprint(plain, b"api-key=k", secret=secret) not in (None, alpha)


def test_requester_changes_the_key() -> None:
    body = {"model": "m"}
    assert key_of(body) != cache_key(upstream_identity=UPSTREAM, path=PATH, body=body, requester="ab")
    assert cache_key(upstream_identity=UPSTREAM, path=PATH, body=body, requester="ab") != cache_key(
        upstream_identity=UPSTREAM, path=PATH, body=body, requester="cd"
    )
