"""The semantic tier's decisions in process, with a stand-in model and Redis: a miss's vector is
written beside its entry with the entry's TTL, a paraphrase of the same group is served SEMANTIC,
another group's entry never, an entry gone from Redis drops its vector, and a model that fails is
logged once and the requests go on as misses (fail-open). No network, no model."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from services.cache_proxy.resp import RedisWrongType
from services.cache_proxy.semantic import SemanticSettings, SemanticTier
from services.cache_proxy.semantic_index import VectorIndex
from services.cache_proxy.semantic_keys import decode_vector_record

VECTORS = {
    "What is the capital of France?": (1.0, 0.0, 0.0),
    "Which city is the capital of France?": (0.96, 0.28, 0.0),
    "How do I bake bread?": (0.0, 0.0, 1.0),
}
ANSWER = b'j{"choices": [{"message": {"content": "Paris."}}]}'


class StandInEmbedder:
    name = "stand-in"
    dimensions = 3

    def __init__(self, *, fails: bool = False) -> None:
        self.fails = fails

    def embed_one(self, text: str) -> np.ndarray:
        if self.fails:
            raise RuntimeError("the model is gone")
        vector = np.array(VECTORS[text], dtype=np.float32)
        return vector / np.linalg.norm(vector)


class StandInRedis:
    """Enough of PipelinedRedis for the tier: values by key, the commands seen."""

    def __init__(self) -> None:
        self.values: dict[bytes, Any] = {}
        self.commands: list[tuple[Any, ...]] = []

    async def execute(self, *parts: Any, timeout_s: float | None = None) -> Any:
        self.commands.append(parts)
        value = self.values.get(parts[1].encode() if isinstance(parts[1], str) else parts[1])
        if value == "a list":
            raise RedisWrongType("WRONGTYPE")
        return value

    async def execute_pipeline(self, *commands: tuple[Any, ...]) -> list[Any]:
        for command in commands:
            self.commands.append(command)
            self.values[command[1].encode()] = command[2]
        return [b"OK"] * len(commands)

    async def set(self, key: str, value: bytes, *, ttl_s: int | None = None) -> None:
        self.values[key.encode()] = value


def tier(*, fails: bool = False) -> tuple[SemanticTier, StandInRedis]:
    settings = SemanticSettings(
        similarity=0.9,
        embed="last_user_turn",
        model="stand-in",
        verify_fraction=0.0,
        namespace="lab",
        upstream_url="http://up",
        upstream_identity="http://up",
    )
    semantic = SemanticTier(settings, CollectorRegistry())
    redis = StandInRedis()
    semantic.embedder = StandInEmbedder(fails=fails)  # type: ignore[assignment]  # a stand-in in the tier's slot
    semantic.index = VectorIndex(3)
    semantic.redis = redis  # type: ignore[assignment]  # a stand-in in the tier's slot
    semantic._rebuilt = True  # nothing to rebuild from the stand-in
    return semantic, redis


def body(text: str, **fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": text}], **fields}).encode()


SCOPE = {"path": "/v1/chat/completions"}


def test_a_miss_stores_its_vector_beside_the_entry_and_a_paraphrase_is_served() -> None:
    semantic, redis = tier()

    async def scenario() -> tuple[Any, Any, Any]:
        missed = await semantic.find(
            SCOPE, body("What is the capital of France?"), "lab:resp:v2:aa", None, lookup=True, streaming=False
        )
        await semantic.store(redis, "lab:resp:v2:aa", ANSWER, 600)  # type: ignore[arg-type]  # a fake Redis client
        paraphrase = await semantic.find(
            SCOPE, body("Which city is the capital of France?"), "lab:resp:v2:bb", None, lookup=True, streaming=False
        )
        other_model = await semantic.find(
            SCOPE,
            body("Which city is the capital of France?", model="other"),
            "lab:resp:v2:cc",
            None,
            lookup=True,
            streaming=False,
        )
        return missed, paraphrase, other_model

    missed, paraphrase, other_model = asyncio.run(scenario())
    assert missed is None and other_model is None
    assert paraphrase is not None and paraphrase.entry_key == "lab:resp:v2:aa"
    headers = dict(paraphrase.prepared[0])
    assert headers[b"x-cache"] == b"SEMANTIC" and headers[b"x-cache-similarity"] == b"0.9600"
    assert paraphrase.prepared[1] == ANSWER[1:]
    entry, vector = [command for command in redis.commands if command[0] == b"SET"]
    assert entry == (b"SET", "lab:resp:v2:aa", ANSWER, b"EX", 600)
    assert vector[1] == "lab:resp:v2:vec:aa" and vector[3:] == (b"EX", 600)  # expires with its entry
    record = decode_vector_record(vector[2])
    assert record is not None and record.entry_key == "lab:resp:v2:aa"


def test_an_entry_gone_or_of_another_type_is_a_miss_and_its_vector_is_dropped() -> None:
    semantic, redis = tier()

    async def scenario() -> list[Any]:
        await semantic.find(
            SCOPE, body("What is the capital of France?"), "lab:resp:v2:aa", None, lookup=True, streaming=False
        )
        await semantic.store(redis, "lab:resp:v2:aa", ANSWER, None)  # type: ignore[arg-type]  # a fake Redis client
        redis.values[b"lab:resp:v2:aa"] = "a list"
        found = [
            await semantic.find(
                SCOPE, body("Which city is the capital of France?"), "k2", None, lookup=True, streaming=False
            )
        ]
        assert semantic.index is not None and len(semantic.index) == 0
        return found

    assert asyncio.run(scenario()) == [None]


def test_a_failing_model_is_logged_once_and_requests_go_on_as_misses(caplog: pytest.LogCaptureFixture) -> None:
    semantic, _ = tier(fails=True)

    async def scenario() -> list[Any]:
        return [
            await semantic.find(
                SCOPE, body("What is the capital of France?"), f"k{n}", None, lookup=True, streaming=False
            )
            for n in range(3)
        ]

    with caplog.at_level(logging.WARNING, logger="services.cache_proxy.semantic"):
        assert asyncio.run(scenario()) == [None, None, None]
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "the model is gone" in warnings[0] and "exact misses" in warnings[0]
    assert semantic.metrics.errors._value.get() == 3
