"""Unit tests of the canonical cache key (services/cache_key.py)."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from services.cache_key import (
    KEY_FORMAT_VERSION,
    cache_key,
    canonical_json,
    is_deterministic_request,
    key_prefix,
    normalize_upstream_identity,
)

UPSTREAM = "http://127.0.0.1:8000"
PATH = "/v1/chat/completions"

json_scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=20) | st.floats(
    allow_nan=False, allow_infinity=False, width=32
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
            st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"]), "content": st.text(max_size=40)}),
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
    variants = [
        {"temperature": 0}, {"top_p": 0.5}, {"seed": 1}, {"stop": ["\n"]}, {"n": 2},
        {"tools": [{"type": "function", "function": {"name": "f"}}]}, {"response_format": {"type": "json_object"}},
        {"stream": True}, {"messages": [{"role": "user", "content": "hi!"}]},
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
    assert not is_deterministic_request({})  # OpenAI's default temperature is 1
    assert not is_deterministic_request({"temperature": 0.7})
    assert not is_deterministic_request({"temperature": 0, "n": 3})
    assert not is_deterministic_request({"seed": 1, "n": 2})
