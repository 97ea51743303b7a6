"""The real OpenAI Python SDK as a lab's application uses it, read the way its user reads an answer
(a stream to its end): shared by the SDK tests against the naive server, vLLM and llama.cpp."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openai import OpenAI

ALPHA_KEY = "sk-lab-test-alpha"


@dataclass(frozen=True)
class Answer:
    """What a client reads of one answer: the proxy's X-Cache (None directly), text, usage."""

    x_cache: str | None
    text: str
    usage: dict[str, int] | None
    finish_reason: str | None
    chunks: int = 0


def sdk(base_url: str, key: str = ALPHA_KEY) -> OpenAI:
    return OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=120)


def _streamed(raw_stream: Any, text_of: Any) -> Answer:
    """A stream read to its end (the SDK closes it at [DONE]); ``text_of`` reads a choice's text."""
    text, usage, finish_reason, count = "", None, None, 0
    for chunk in raw_stream.parse():
        count += 1
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            text += text_of(choice) or ""
            finish_reason = choice.finish_reason or finish_reason
    return Answer(raw_stream.headers.get("x-cache"), text, usage, finish_reason, count)


def _plain(raw: Any, text_of: Any) -> Answer:
    completion = raw.parse()
    usage = completion.usage.model_dump() if completion.usage else None
    choice = completion.choices[0]
    return Answer(raw.headers.get("x-cache"), text_of(choice) or "", usage, choice.finish_reason)


def chat_answer(client: OpenAI, model: str, content: str, *, stream: bool, include_usage: bool = True) -> Answer:
    """One chat completion through the SDK, read as its user reads it (a stream to its end)."""
    messages: Any = [{"role": "user", "content": content}]
    create = client.chat.completions.with_raw_response.create
    if not stream:
        raw = create(model=model, messages=messages, max_tokens=8, temperature=0)
        return _plain(raw, lambda choice: choice.message.content)
    options: Any = {"include_usage": include_usage}
    raw_stream = create(
        model=model, messages=messages, max_tokens=8, temperature=0, stream=True, stream_options=options
    )
    return _streamed(raw_stream, lambda choice: choice.delta.content)


def text_answer(client: OpenAI, model: str, prompt: str, *, stream: bool, include_usage: bool = True) -> Answer:
    """One text completion (``/v1/completions``) through the SDK."""
    create = client.completions.with_raw_response.create
    if not stream:
        raw = create(model=model, prompt=prompt, max_tokens=8, temperature=0)
        assert raw.parse().object == "text_completion"
        return _plain(raw, lambda choice: choice.text)
    options: Any = {"include_usage": include_usage}
    raw_stream = create(model=model, prompt=prompt, max_tokens=8, temperature=0, stream=True, stream_options=options)
    return _streamed(raw_stream, lambda choice: choice.text)


def assert_one_client_serves_chat_and_completions(base_url: str, *, usage_when_streamed: bool = True) -> str:
    """The same SDK calls a lab's application makes, against one backend: chat and completions,
    plain and streamed, read to their ends; a streamed answer equals the plain one (temperature 0).
    Returns the model's id. ``usage_when_streamed`` False for a server that ignores
    ``stream_options`` (llama-cpp-python's: it answers, without the usage chunk)."""
    client = sdk(base_url)
    model = client.models.list().data[0].id
    for ask, prompt in ((chat_answer, "Name one colour."), (text_answer, "Once upon a time, the number seven")):
        plain = ask(client, model, prompt, stream=False)
        streamed = ask(client, model, prompt, stream=True)
        assert plain.text.strip() and plain.usage is not None, plain
        assert 0 < plain.usage["completion_tokens"] <= 8, plain.usage
        assert streamed.text == plain.text, (streamed, plain)
        assert streamed.usage == (plain.usage if usage_when_streamed else None), (streamed, plain)
    return model
