"""Unit tests of the naive Transformers server, on a tiny random Llama with SmolLM2's tokenizer.

The model is random, so its text is gibberish, but everything a client sees is checked:
response shapes, streaming, stop strings, token budgets, errors, metrics and the
one-request-at-a-time lock.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from services.naive_server.detokenizer import IncrementalDetokenizer

# torch computes here: `make test` runs these, `make test-fast` leaves them out (and, with the
# imports below kept inside the fixtures, never imports torch to deselect them).
pytestmark = pytest.mark.model

REPO_ROOT = Path(__file__).resolve().parents[4]
SMOLLM2_DIR = REPO_ROOT / "models" / "SmolLM2-135M-Instruct"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")
TINY_CONTEXT_TOKENS = 512
MAX_BODY_BYTES = 20_000
SERVED_NAME = "tiny-llama"
PROMPT = [{"role": "user", "content": "Write a short story about the number 7."}]
# Greedy text from a random model is often one token repeated; seeded sampling gives
# varied text that is still the same on every call.
SEEDED_SAMPLING = {"temperature": 1.0, "seed": 7}


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer Llama (hidden 32) saved with SmolLM2's tokenizer and chat template."""
    if not (SMOLLM2_DIR / "tokenizer.json").exists():
        pytest.skip(f"needs SmolLM2's tokenizer in {SMOLLM2_DIR} (run scripts/convert_model.py)")
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    model_dir = tmp_path_factory.mktemp("tiny-llama")
    for name in TOKENIZER_FILES:
        if (SMOLLM2_DIR / name).exists():
            shutil.copy(SMOLLM2_DIR / name, model_dir / name)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=TINY_CONTEXT_TOKENS,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(model_dir)
    return model_dir


@pytest.fixture(scope="module")
def client(tiny_model_dir: Path) -> Iterator[TestClient]:
    """The app on the tiny model, lifespan run (model loaded)."""
    from services.naive_server.app import build_app

    app = build_app(
        model_path=str(tiny_model_dir), dtype="float32", max_body_bytes=MAX_BODY_BYTES, served_model_name=SERVED_NAME
    )
    with TestClient(app) as test_client:
        yield test_client


def chat(client: TestClient, **fields: Any) -> Any:
    """POST a chat completion with the default prompt; ``fields`` override the body."""
    body = {"model": SERVED_NAME, "messages": PROMPT, **fields}
    return client.post("/v1/chat/completions", json=body)


def sse_payloads(response: Any) -> list[str]:
    """The ``data:`` payloads of a server-sent-event body, in order."""
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [event for event in response.text.split("\n\n") if event.strip()]
    assert all(event.startswith("data: ") for event in events), events
    return [event[len("data: ") :] for event in events]


def metric_samples(client: TestClient) -> dict[str, float]:
    """``/metrics`` as {sample name with labels: value}."""
    response = client.get("/metrics")
    assert response.status_code == 200
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f"{key}={value}" for key, value in sorted(sample.labels.items()) if key != "model_name")
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def assert_openai_error(response: Any, status_code: int, *, param: str | None = None) -> dict[str, Any]:
    """The response is an OpenAI-shaped error with this status; returns the error object."""
    assert response.status_code == status_code, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


# ---------------------------------------------------------------- plain endpoints


def test_health_and_models_list(client: TestClient, tiny_model_dir: Path) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert [card["id"] for card in models["data"]] == [SERVED_NAME]
    assert models["data"][0]["object"] == "model"
    assert models["data"][0]["max_model_len"] == TINY_CONTEXT_TOKENS


# ---------------------------------------------------------------- completions


def test_non_streamed_completion_has_openai_shape_and_usage(client: TestClient) -> None:
    response = chat(client, max_tokens=12, temperature=0)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == SERVED_NAME
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
    usage = body["usage"]
    assert usage["prompt_tokens"] > 10  # the chat template adds a system prompt
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    if choice["finish_reason"] == "length":
        assert usage["completion_tokens"] == 12
    else:  # the random model may emit <|im_end|> early
        assert choice["finish_reason"] == "stop" and usage["completion_tokens"] <= 12


def test_response_echoes_the_model_named_by_path_or_by_served_name(client: TestClient, tiny_model_dir: Path) -> None:
    by_path = chat(client, model=str(tiny_model_dir), max_tokens=2, temperature=0)
    assert by_path.status_code == 200 and by_path.json()["model"] == str(tiny_model_dir)
    without_model = client.post("/v1/chat/completions", json={"messages": PROMPT, "max_tokens": 2})
    assert without_model.status_code == 200 and without_model.json()["model"] == SERVED_NAME


def test_default_max_tokens_is_128(client: TestClient) -> None:
    body = chat(client, temperature=0).json()
    assert body["usage"]["completion_tokens"] <= 128
    if body["choices"][0]["finish_reason"] == "length":
        assert body["usage"]["completion_tokens"] == 128


def test_max_completion_tokens_wins_over_max_tokens(client: TestClient) -> None:
    body = chat(client, max_tokens=20, max_completion_tokens=3, temperature=0).json()
    assert body["usage"]["completion_tokens"] <= 3


def test_greedy_is_deterministic_and_seed_makes_sampling_repeatable(client: TestClient) -> None:
    greedy = [chat(client, max_tokens=16, temperature=0).json()["choices"][0]["message"]["content"] for _ in range(2)]
    assert greedy[0] == greedy[1]
    seeded = [
        chat(client, max_tokens=16, temperature=1.0, top_p=0.9, seed=1234).json()["choices"][0]["message"]["content"]
        for _ in range(2)
    ]
    assert seeded[0] == seeded[1]
    other_seeds = {
        chat(client, max_tokens=16, temperature=1.0, seed=seed).json()["choices"][0]["message"]["content"]
        for seed in (1, 2, 3)
    }
    assert len(other_seeds) > 1, "sampling with different seeds should not always give the same text"


def test_stream_matches_non_stream_and_ends_with_usage_and_done(client: TestClient) -> None:
    plain = chat(client, max_tokens=24, **SEEDED_SAMPLING).json()
    response = chat(client, max_tokens=24, stream=True, stream_options={"include_usage": True}, **SEEDED_SAMPLING)
    assert response.status_code == 200
    payloads = sse_payloads(response)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(payload) for payload in payloads[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert all(chunk["model"] == SERVED_NAME for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"

    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == plain["usage"]
    final_chunk = chunks[-2]
    assert final_chunk["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in chunks[:-2])
    streamed_text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks[:-1])
    assert streamed_text == plain["choices"][0]["message"]["content"]


def test_stream_without_include_usage_has_no_usage_chunk(client: TestClient) -> None:
    payloads = sse_payloads(chat(client, max_tokens=4, temperature=0, stream=True))
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(payload) for payload in payloads[:-1]]
    assert all(chunk["choices"] for chunk in chunks)
    assert all("usage" not in chunk for chunk in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in {"stop", "length"}


def _stop_string_from(text: str) -> str:
    """A short piece from the middle of ``text`` to use as a stop string."""
    middle = len(text) // 2
    stop = text[middle : middle + 3]
    assert stop.strip(), f"need visible text to cut, got {text!r}"
    return stop


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_cuts_the_text_and_finishes_with_stop(client: TestClient, stream: bool) -> None:
    full = chat(client, max_tokens=40, **SEEDED_SAMPLING).json()
    full_text = full["choices"][0]["message"]["content"]
    stop = _stop_string_from(full_text)
    expected = full_text[: full_text.find(stop)]

    response = chat(client, max_tokens=40, stop=["never-in-this-text", stop], stream=stream, **SEEDED_SAMPLING)
    assert response.status_code == 200
    if stream:
        chunks = [json.loads(payload) for payload in sse_payloads(response)[:-1]]
        text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks)
        finish_reason = chunks[-1]["choices"][0]["finish_reason"]
    else:
        body = response.json()
        text = body["choices"][0]["message"]["content"]
        finish_reason = body["choices"][0]["finish_reason"]
        assert body["usage"]["completion_tokens"] < full["usage"]["completion_tokens"]
    assert text == expected
    assert stop not in text
    assert finish_reason == "stop"


# ---------------------------------------------------------------- text completions (/v1/completions)

TEXT_PROMPT = "Once upon a time, the number seven"


def complete_text(client: TestClient, **fields: Any) -> Any:
    """POST a text completion of ``TEXT_PROMPT``; ``fields`` override the body."""
    return client.post("/v1/completions", json={"model": SERVED_NAME, "prompt": TEXT_PROMPT, **fields})


def test_text_completion_has_openai_shape_usage_and_no_chat_template(client: TestClient, tokenizer: Any) -> None:
    response = complete_text(client, max_tokens=12, **SEEDED_SAMPLING)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-") and body["model"] == SERVED_NAME
    (choice,) = body["choices"]
    assert set(choice) == {"index", "text", "finish_reason", "logprobs"}
    assert isinstance(choice["text"], str) and choice["text"]
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(tokenizer(TEXT_PROMPT)["input_ids"])  # the prompt as it is, no template
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] == 12 if choice["finish_reason"] == "length" else usage["completion_tokens"] <= 12
    same = complete_text(client, max_tokens=12, **SEEDED_SAMPLING).json()
    assert same["choices"][0]["text"] == choice["text"]
    as_ids = complete_text(client, prompt=tokenizer(TEXT_PROMPT)["input_ids"], max_tokens=12, **SEEDED_SAMPLING).json()
    as_list = complete_text(client, prompt=[TEXT_PROMPT], max_tokens=12, **SEEDED_SAMPLING).json()
    assert as_ids["choices"][0]["text"] == as_list["choices"][0]["text"] == choice["text"]


def test_text_completion_defaults_to_16_tokens_as_openai_and_vllm(client: TestClient) -> None:
    body = complete_text(client, **SEEDED_SAMPLING).json()
    assert body["usage"]["completion_tokens"] <= 16
    if body["choices"][0]["finish_reason"] == "length":
        assert body["usage"]["completion_tokens"] == 16


@pytest.mark.parametrize("include_usage", [True, False])
def test_streamed_text_completion_matches_the_whole_one(client: TestClient, include_usage: bool) -> None:
    plain = complete_text(client, max_tokens=20, **SEEDED_SAMPLING).json()
    response = complete_text(
        client, max_tokens=20, stream=True, stream_options={"include_usage": include_usage}, **SEEDED_SAMPLING
    )
    assert response.status_code == 200
    payloads = sse_payloads(response)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(payload) for payload in payloads[:-1]]
    assert all(chunk["object"] == "text_completion" for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1 and chunks[0]["id"].startswith("cmpl-")
    text_chunks = chunks[:-1] if include_usage else chunks
    assert "".join(chunk["choices"][0]["text"] for chunk in text_chunks) == plain["choices"][0]["text"]
    assert text_chunks[-1]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in text_chunks[:-1])
    if include_usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == plain["usage"]
    else:
        assert all("usage" not in chunk for chunk in chunks)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"prompt": ""}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": ["one", "two"]}, "prompt"),
        ({"prompt": [1, 10**9]}, "prompt"),
        ({"prompt": {"text": "x"}}, "prompt"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": 2}, "n"),
        ({"best_of": 2}, "best_of"),
        ({"echo": True}, None),
        ({"logprobs": 1}, None),
        ({"suffix": "x"}, None),
    ],
)
def test_text_completion_refuses_what_it_does_not_do_naming_the_parameter(
    client: TestClient, fields: dict[str, Any], param: str | None
) -> None:
    error = assert_openai_error(complete_text(client, **fields), 400, param=param)
    assert error["type"] == "invalid_request_error"


def test_text_completion_over_the_context_or_of_an_unknown_model_is_refused(client: TestClient) -> None:
    error = assert_openai_error(complete_text(client, max_tokens=TINY_CONTEXT_TOKENS), 400, param="prompt")
    assert error["code"] == "context_length_exceeded" and "in the prompt" in error["message"]
    assert assert_openai_error(complete_text(client, model="gpt-nope"), 404, param="model")["code"] == "model_not_found"


# ---------------------------------------------------------------- errors


def test_bad_json_is_a_400_openai_error(client: TestClient) -> None:
    response = client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    error = assert_openai_error(response, 400)
    assert error["type"] == "invalid_request_error"
    assert "JSON" in error["message"]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": []}, "messages"),
        ({"temperature": -1}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"top_p": 0}, "top_p"),
        ({"stop": [""]}, "stop"),
        ({"n": 2}, "n"),
        ({"messages": [{"content": "no role"}]}, "messages.0.role"),
    ],
)
def test_invalid_fields_are_400_naming_the_parameter(client: TestClient, fields: dict[str, Any], param: str) -> None:
    assert_openai_error(chat(client, **fields), 400, param=param)


def test_unknown_model_is_404(client: TestClient) -> None:
    error = assert_openai_error(chat(client, model="gpt-nope", max_tokens=2), 404, param="model")
    assert error["code"] == "model_not_found"
    assert "gpt-nope" in error["message"]


def test_prompt_plus_max_tokens_over_context_is_400(client: TestClient) -> None:
    error = assert_openai_error(chat(client, max_tokens=TINY_CONTEXT_TOKENS), 400)
    assert error["code"] == "context_length_exceeded"
    assert f"maximum context length is {TINY_CONTEXT_TOKENS} tokens" in error["message"]
    long_prompt = [{"role": "user", "content": "seven " * TINY_CONTEXT_TOKENS}]
    error = assert_openai_error(chat(client, messages=long_prompt), 400)
    assert error["code"] == "context_length_exceeded"


def test_body_over_the_limit_is_413_by_header_and_by_actual_size(client: TestClient) -> None:
    big_body = json.dumps({"model": SERVED_NAME, "messages": [{"role": "user", "content": "x" * MAX_BODY_BYTES}]})
    by_header = client.post(
        "/v1/chat/completions", content=big_body.encode(), headers={"content-type": "application/json"}
    )
    assert_openai_error(by_header, 413)

    def chunked() -> Iterator[bytes]:  # no Content-Length: the server must count the bytes
        data = big_body.encode()
        for start in range(0, len(data), 4096):
            yield data[start : start + 4096]

    by_size = client.post("/v1/chat/completions", content=chunked(), headers={"content-type": "application/json"})
    assert "content-length" not in by_size.request.headers
    assert_openai_error(by_size, 413)


def test_unknown_route_is_an_openai_shaped_404(client: TestClient) -> None:
    assert_openai_error(client.get("/v1/nothing"), 404)


# ---------------------------------------------------------------- metrics and the lock


def test_metrics_counters_move_with_a_request(client: TestClient) -> None:
    before = metric_samples(client)
    body = chat(client, max_tokens=5, temperature=0).json()
    after = metric_samples(client)
    usage = body["usage"]
    reason = body["choices"][0]["finish_reason"]

    def moved(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert moved("vllm:prompt_tokens_total{}") == usage["prompt_tokens"]
    assert moved("vllm:generation_tokens_total{}") == usage["completion_tokens"]
    assert moved(f"vllm:request_success_total{{finished_reason={reason}}}") == 1
    for histogram in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
    ):
        assert moved(f"{histogram}_count{{}}") == 1, histogram
    assert after["vllm:num_requests_running{}"] == 0
    assert after["vllm:num_requests_waiting{}"] == 0


def test_exposes_vllm_metric_names(client: TestClient) -> None:
    text = client.get("/metrics").text
    for name in (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:request_time_per_output_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
    ):
        assert f"\n{name}{{" in text, name
    assert f'model_name="{SERVED_NAME}"' in text


def test_one_request_generates_at_a_time_and_others_wait(client: TestClient) -> None:
    results: list[Any] = []

    def send() -> None:
        results.append(chat(client, max_tokens=150, temperature=0, stream=True))

    senders = [threading.Thread(target=send) for _ in range(2)]
    for sender in senders:
        sender.start()
    max_waiting = max_running = 0.0
    deadline_s = time.monotonic() + 60
    while any(sender.is_alive() for sender in senders) and time.monotonic() < deadline_s:
        samples = metric_samples(client)
        max_waiting = max(max_waiting, samples["vllm:num_requests_waiting{}"])
        max_running = max(max_running, samples["vllm:num_requests_running{}"])
        time.sleep(0.01)
    for sender in senders:
        sender.join(timeout=60)
    assert [response.status_code for response in results] == [200, 200]
    assert max_running == 1, "never more than one generate at a time"
    assert max_waiting == 1, "the second request should have waited for the first"
    assert client.get("/health").status_code == 200


def _post_then_leave(client: TestClient, body: dict[str, Any], leave: threading.Event) -> list[dict[str, Any]]:
    """POST at the ASGI level; the client disconnects once ``leave`` is set. The messages sent back."""
    sent: list[dict[str, Any]] = []
    payload = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }

    async def call() -> None:
        import anyio

        messages = [{"type": "http.request", "body": payload, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop(0)
            while not leave.is_set():
                await anyio.sleep(0.01)
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        await client.app(scope, receive, send)

    assert client.portal is not None  # inside the TestClient's context
    client.portal.call(call)
    return sent


def test_a_queued_request_whose_client_left_never_generates(client: TestClient) -> None:
    before = metric_samples(client)
    app: Any = client.app
    lock = app.state.engine._lock
    assert client.portal is not None  # inside the TestClient's context
    client.portal.call(lock.acquire)  # a generation in progress, as far as the queue can tell
    leave = threading.Event()
    body = {"model": SERVED_NAME, "messages": PROMPT, "max_tokens": 50, "temperature": 0}
    results: list[list[dict[str, Any]]] = []
    sender = threading.Thread(target=lambda: results.append(_post_then_leave(client, body, leave)))
    sender.start()
    deadline_s = time.monotonic() + 30
    while metric_samples(client)["vllm:num_requests_waiting{}"] < 1 and time.monotonic() < deadline_s:
        time.sleep(0.01)
    leave.set()  # k6's graceful stop ended the test: the queued request's client is gone
    sender.join(timeout=30)
    client.portal.call(lock.release)
    assert not sender.is_alive()
    [start] = [message for message in results[0] if message["type"] == "http.response.start"]
    assert start["status"] == 499
    after = metric_samples(client)
    assert after["vllm:generation_tokens_total{}"] == before["vllm:generation_tokens_total{}"]
    assert after["vllm:num_requests_waiting{}"] == 0 and after["vllm:num_requests_running{}"] == 0
    aborted = "vllm:request_success_total{finished_reason=abort}"
    assert after[aborted] - before.get(aborted, 0.0) == 1
    assert chat(client, max_tokens=2, temperature=0).status_code == 200  # the lock is free again


def test_a_running_generation_stops_when_its_client_leaves(client: TestClient) -> None:
    before = metric_samples(client)
    leave = threading.Event()
    leave.set()  # gone right after sending the body
    body = {"model": SERVED_NAME, "messages": PROMPT, "max_tokens": 400, "temperature": 0}
    _post_then_leave(client, body, leave)
    after = metric_samples(client)
    generated = after["vllm:generation_tokens_total{}"] - before["vllm:generation_tokens_total{}"]
    assert generated < 400
    successes = {name: after[name] - before.get(name, 0.0) for name in after if "request_success_total" in name}
    assert sum(successes.values()) == 1 and successes.get("vllm:request_success_total{finished_reason=abort}") == 1
    assert chat(client, max_tokens=2, temperature=0).status_code == 200


# ---------------------------------------------------------------- detokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_detokenizer_rebuilds_multibyte_text_token_by_token(tokenizer: Any) -> None:
    text = "Sept = 7 — siebte Zahl, 七, 🎲 rolls a seven!"
    detokenizer = IncrementalDetokenizer(tokenizer)
    deltas = [detokenizer.push([token_id]) for token_id in tokenizer.encode(text, add_special_tokens=False)]
    deltas.append(detokenizer.flush())
    assert "".join(deltas) == text
    assert not any("\ufffd" in delta for delta in deltas)


def test_detokenizer_holds_back_a_possible_stop_string_and_cuts_before_it(tokenizer: Any) -> None:
    text = "The number seven is lucky. END of story, more text"
    detokenizer = IncrementalDetokenizer(tokenizer, stop_strings=("END of",))
    shown = ""
    for token_id in tokenizer.encode(text, add_special_tokens=False):
        shown += detokenizer.push([token_id])
        assert "END" not in shown
        if detokenizer.stopped:
            break
    assert detokenizer.stopped
    assert shown + detokenizer.flush() == "The number seven is lucky. "


def test_detokenizer_releases_held_text_that_was_not_a_stop(tokenizer: Any) -> None:
    text = "an ENDless story"
    detokenizer = IncrementalDetokenizer(tokenizer, stop_strings=("END of",))
    shown = "".join(detokenizer.push([token_id]) for token_id in tokenizer.encode(text, add_special_tokens=False))
    shown += detokenizer.flush()
    assert shown == text
    assert not detokenizer.stopped
