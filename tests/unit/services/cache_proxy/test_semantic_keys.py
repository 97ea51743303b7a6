"""What the semantic tier compares: the group (everything but the embedded text, exact), the
embedded text, the vector record in Redis, the answer text a verification compares; and the
in-process index. No model, no network."""

from __future__ import annotations

import numpy as np
import pytest

from services.cache_proxy import semantic_index
from services.cache_proxy.semantic_index import VectorIndex
from services.cache_proxy.semantic_keys import (
    SemanticRequest,
    VectorRecord,
    answer_text,
    decode_vector_record,
    encode_vector_record,
    semantic_request,
    vector_key,
)


def keyed(
    body: dict,
    *,
    embed: str = "last_user_turn",
    namespace: str = "lab",
    upstream_identity: str = "http://up",
    requester: str | None = None,
) -> SemanticRequest | None:
    return semantic_request(
        body,
        path="/v1/chat/completions",
        upstream_identity=upstream_identity,
        namespace=namespace,
        requester=requester,
        embed=embed,
    )


def chat(*messages: tuple[str, str], **fields: object) -> dict:
    return {"model": "m", "messages": [{"role": role, "content": text} for role, text in messages], **fields}


def test_last_user_turn_embeds_that_turn_and_groups_on_everything_else() -> None:
    request = keyed(chat(("system", "Be brief."), ("user", "Capital of France?")))
    paraphrase = keyed(chat(("system", "Be brief."), ("user", "France's capital?")))
    assert request is not None and paraphrase is not None
    assert request.text == "Capital of France?"
    assert request.group == paraphrase.group
    for changed in (
        chat(("system", "Be long."), ("user", "Capital of France?")),  # an earlier turn
        chat(("system", "Be brief."), ("user", "Capital of France?"), max_tokens=5),
        chat(("system", "Be brief."), ("user", "Capital of France?"), temperature=0.5),
        chat(("system", "Be brief."), ("user", "Capital of France?"), tools=[{"type": "function"}]),
        {**chat(("system", "Be brief."), ("user", "Capital of France?")), "model": "other"},
    ):
        other = keyed(changed)
        assert other is not None and other.group != request.group, changed


def test_the_place_and_the_requester_split_groups() -> None:
    body = chat(("user", "Capital of France?"))
    base = keyed(body)
    assert base is not None
    changes: list[dict[str, str]] = [{"requester": "hmac-of-bob"}, {"namespace": "other"}, {"upstream_identity": "x"}]
    for change in changes:
        other = keyed(body, **change)
        assert other is not None and other.group != base.group, change


def test_conversation_embeds_every_turn_and_scopes_never_share_a_group() -> None:
    body = chat(("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello"), ("user", "Capital of France?"))
    whole = keyed(body, embed="conversation")
    last = keyed(body)
    assert whole is not None and last is not None
    assert whole.text == "system: Be brief.\nuser: Hi\nassistant: Hello\nuser: Capital of France?"
    assert whole.group != last.group
    shorter = keyed(chat(("user", "Capital of France?")), embed="conversation")
    assert shorter is not None and shorter.group == whole.group  # only the other fields group


def test_completions_embed_the_prompt_and_what_is_not_plain_text_gets_no_semantic_key() -> None:
    completion = keyed({"model": "m", "prompt": "Once upon"})
    assert completion is not None and completion.text == "Once upon"
    parts = chat(("user", "x"))
    parts["messages"][0]["content"] = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert keyed(parts).text == "a\nb"  # type: ignore[union-attr]  # keyed: the request has a text
    image = chat(("user", "x"))
    image["messages"][0]["content"] = [{"type": "image_url", "image_url": {"url": "data:"}}]
    for body in (
        image,
        {"model": "m", "prompt": ["a", "b"]},
        chat(("assistant", "only an assistant turn")),
        chat(("user", "   ")),
        {"model": "m"},
    ):
        assert keyed(body) is None, body
    with pytest.raises(ValueError, match="embed must be one of"):
        keyed(chat(("user", "x")), embed="everything")


def test_a_vector_record_round_trips_and_a_bad_value_is_none() -> None:
    vector = np.arange(4, dtype=np.float32) / 10
    record = VectorRecord("g" * 64, "lab:resp:v2:abc", "all-MiniLM-L6-v2", vector)
    decoded = decode_vector_record(encode_vector_record(record))
    assert decoded is not None
    assert decoded[:3] == record[:3] and np.array_equal(decoded.vector, vector)
    encoded = encode_vector_record(record)
    for bad in (
        b"",
        b"no newline",
        encoded[:-1],
        b'{"version": 9}\n',
        encoded.replace(b'"version": 1', b'"version": 2'),
    ):
        assert decode_vector_record(bad) is None, bad
    assert vector_key("lab:resp:v2:abc", "lab") == "lab:resp:v2:vec:abc"  # flushed with the namespace


def test_answer_text_of_json_and_streams() -> None:
    assert answer_text(b'{"choices": [{"message": {"content": "Paris"}}]}', is_stream=False) == "Paris"
    assert answer_text(b'{"choices": [{"text": "Paris"}]}', is_stream=False) == "Paris"
    stream = (
        b'data: {"choices": [{"delta": {"content": "Par"}}]}\n\n'
        b'data: {"choices": [{"delta": {"content": "is"}}]}\n\ndata: [DONE]\n\n'
    )
    assert answer_text(stream, is_stream=True) == "Paris"
    for bad in (b"not json", b'{"choices": []}', b'{"choices": [{"message": {"content": 3}}]}'):
        assert answer_text(bad, is_stream=False) is None


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_the_index_finds_the_nearest_of_the_same_group_only() -> None:
    index = VectorIndex(3)
    index.add("g", "a", unit(1, 0, 0))
    index.add("g", "b", unit(0, 1, 0))
    index.add("h", "c", unit(1, 0.05, 0))
    found = index.nearest("g", unit(1, 0.1, 0))
    assert found is not None and found[0] == "a" and found[1] == pytest.approx(0.995, abs=1e-3)
    assert index.nearest("nobody", unit(1, 0, 0)) is None
    index.remove("a")
    assert index.nearest("g", unit(1, 0.1, 0))[0] == "b"  # type: ignore[index]  # a match exists: asserted by the test
    index.add("g", "b", unit(0, 0, 1))  # replaced, not added twice
    assert len(index) == 2 and index.groups == 2
    index.remove("b")
    index.remove("b")
    assert index.groups == 1 and index.nearest("g", unit(1, 0, 0)) is None
    with pytest.raises(ValueError, match="dimensions"):
        index.add("g", "x", unit(1, 0))
    index.clear()
    assert len(index) == 0 and index.memory_bytes() == 0


def test_a_large_group_is_searched_through_the_graph_and_stays_consistent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(semantic_index, "EXACT_SEARCH_MAX_ENTRIES", 10)
    index = VectorIndex(3)
    for number in range(30):
        index.add("g", f"k{number}", unit(number + 1, 1, number % 3))
    index.remove("k5")
    index.remove("k29")
    assert len(index) == 28
    found = index.nearest("g", unit(11, 1, 10 % 3))
    assert found is not None and found[0] == "k10" and found[1] == pytest.approx(1.0, abs=1e-5)
    assert index.memory_bytes() > 30 * 3 * 4
