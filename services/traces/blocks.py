"""A prompt's token blocks as Mooncake hash ids: the tokens cut into blocks of
``block_tokens``, each block's digest chained to the one before it (so id k stands for block k
together with every block before it, as the trace workload reads them), and the digests
numbered in the order they were first seen (0, 1, 2, ...), as Mooncake's published traces are.

Two prompts get the same first k ids exactly when their first k blocks are token for token
equal; a last, partial block is a block of its own (a longer prompt that goes on past it has
another id there).

Tokens: the model's own tokenizer with its chat template (:class:`ChatTemplateTokens`), so
lengths and blocks are the server's; without one, :class:`ByteTokens` counts four bytes of the
prompt's text as a token, which keeps equal prefixes equal but only approximates lengths.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

MOONCAKE_BLOCK_TOKENS = 512
DIGEST_BYTES = 16
# ByteTokens: bytes of text per token (English text runs at about four bytes a token).
BYTES_PER_TOKEN = 4


def chained_block_digests(tokens: Sequence[int], block_tokens: int) -> list[bytes]:
    """One digest per block of ``block_tokens`` tokens (the last may be shorter), each over
    the block's tokens and the digest before it."""
    digests: list[bytes] = []
    previous = b""
    for start in range(0, len(tokens), block_tokens):
        block = array("q", tokens[start : start + block_tokens]).tobytes()
        previous = hashlib.blake2b(previous + block, digest_size=DIGEST_BYTES).digest()
        digests.append(previous)
    return digests


class HashIds:
    """Chained block digests numbered in first-seen order: the hash ids of one trace file."""

    def __init__(self) -> None:
        self._ids: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def ids_of(self, tokens: Sequence[int], block_tokens: int) -> list[int]:
        """The hash ids of a prompt of ``tokens``; blocks seen before keep their ids."""
        return self.ids_of_digests(chained_block_digests(tokens, block_tokens))

    def ids_of_digests(self, digests: Sequence[bytes]) -> list[int]:
        """The hash ids of a prompt's chained block digests (:func:`chained_block_digests`)."""
        ids = []
        for digest in digests:
            found = self._ids.get(digest)
            if found is None:
                found = self._ids[digest] = len(self._ids)
            ids.append(found)
        return ids


class PromptTokens(Protocol):
    """Turns a request body into the prompt's tokens (None: the body holds no prompt)."""

    exact: bool  # lengths are the server's (its tokenizer and template), not an estimate

    def tokens(self, path: str, body: dict[str, Any]) -> list[int] | None: ...


def prompt_text(path: str, body: dict[str, Any]) -> str | None:
    """The prompt as text: the chat messages as canonical JSON, or the completion's prompt."""
    if path.endswith("/chat/completions"):
        messages = body.get("messages")
        return json.dumps(messages, sort_keys=True, ensure_ascii=False) if isinstance(messages, list) else None
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, ensure_ascii=False) if prompt is not None else None


class ByteTokens:
    """Four bytes of the prompt's UTF-8 text as one token: no tokenizer needed."""

    exact = False

    def tokens(self, path: str, body: dict[str, Any]) -> list[int] | None:
        text = prompt_text(path, body)
        if text is None:
            return None
        data = text.encode("utf-8", "surrogatepass")
        return [
            int.from_bytes(data[start : start + BYTES_PER_TOKEN], "little")
            for start in range(0, len(data), BYTES_PER_TOKEN)
        ]


class ChatTemplateTokens:
    """The model's tokenizer (a Hugging Face folder with ``tokenizer.json``): chat prompts rendered
    with its chat template and the generation prompt, then encoded without special tokens (as
    transformers' ``apply_chat_template`` does, the way vLLM and the naive server count them);
    completion prompts encoded as they are.

    Built from the ``tokenizers`` library and a jinja2 sandbox with transformers' settings, not
    from transformers itself: importing transformers takes seconds of CPU, which a proxy would
    spend before it serves. Loaded by :meth:`load` (or on first use)."""

    exact = True

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._tokenizer: Any = None
        self._template: Any = None
        self._special: dict[str, str] = {}

    def load(self) -> ChatTemplateTokens:
        """Load the tokenizer and compile the template now; :class:`ValueError` (one line) when
        the folder has no fast tokenizer or no chat template."""
        if self._tokenizer is not None:
            return self
        from tokenizers import Tokenizer

        if not (self.path / "tokenizer.json").is_file():
            raise ValueError(f"{self.path}: no tokenizer.json (a fast Hugging Face tokenizer is needed)")
        config = json.loads((self.path / "tokenizer_config.json").read_text(encoding="utf-8"))
        self._template = _compiled_template(self.path, config)
        self._special = {name: _token_text(config.get(name)) for name in ("bos_token", "eos_token")}
        self._tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        return self

    def tokens(self, path: str, body: dict[str, Any]) -> list[int] | None:
        self.load()
        if path.endswith("/chat/completions"):
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return None
            text = self._template.render(messages=messages, add_generation_prompt=True, **self._special)
            return list(self._tokenizer.encode(text, add_special_tokens=False).ids)
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return list(self._tokenizer.encode(prompt).ids)
        if isinstance(prompt, list) and all(isinstance(token, int) for token in prompt):
            return list(prompt)
        return None


def _token_text(value: Any) -> str:
    """A special token as the config gives it: a string, or an object with its ``content``."""
    if isinstance(value, dict):
        return str(value.get("content") or "")
    return value if isinstance(value, str) else ""


def _compiled_template(folder: Path, config: dict[str, Any]) -> Any:
    """The folder's chat template (``chat_template.jinja``, else the config's), compiled as
    transformers compiles it (sandboxed, trimmed blocks, loop controls, ``raise_exception``)."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    source: Any = None
    if (folder / "chat_template.jinja").is_file():
        source = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    else:
        source = config.get("chat_template")
        if isinstance(source, list):  # named templates: the default one
            source = next((item.get("template") for item in source if item.get("name") == "default"), None)
    if not isinstance(source, str):
        raise ValueError(f"{folder}: no chat template (chat_template.jinja or tokenizer_config.json's)")

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    environment.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    environment.globals["raise_exception"] = raise_exception
    return environment.from_string(source)
