"""One observed request as a Mooncake trace line (:class:`TraceLines`): pure, no file, no thread.

A line holds the request's arrival in ms from the file's first request, the prompt's length
and hash ids (:mod:`.blocks`), the answer's length, the session where the request names one,
and the prompt's text only when asked (``messages`` for a chat request, ``input_text`` for a
completion), so a recording holds no text by default.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from services.traces.answers import answer_tokens, asked_output_tokens, session_id
from services.traces.blocks import HashIds, PromptTokens, chained_block_digests

# Prompts and answers already worked out, by their bytes: a response cache's hits repeat both.
MEMO_ENTRIES = 4096


class Observation(NamedTuple):
    """A request the proxy saw: when it arrived (monotonic seconds), its path, body and
    headers, and the answer's bytes as the client got them (None: none was sent). A named
    tuple: the writer makes one for every request the proxy answers."""

    arrived_s: float
    path: str
    raw_body: bytes
    headers: Sequence[tuple[bytes, bytes]]
    answer: bytes | None


@dataclass(frozen=True)
class _Prompt:
    """What a request body gives a line, whatever its answer."""

    tokens: int
    digests: tuple[bytes, ...]
    asked_output_tokens: int | None
    body_session: str | None
    text: str | None  # the prompt's JSON field(s), ready to join the line


class TraceLines:
    """Observations as trace lines of one file: its clock starts at its first request, its
    hash ids at 0. :meth:`restart` begins the next file."""

    def __init__(self, tokens: PromptTokens, *, block_tokens: int, record_text: bool) -> None:
        self.tokens = tokens
        self.block_tokens = block_tokens
        self.record_text = record_text
        self._prompts: dict[tuple[str, bytes], _Prompt | None] = {}
        self._outputs: dict[bytes, tuple[int | None, int | None]] = {}
        self.restart()

    def restart(self) -> None:
        """Start a new file: timestamps from its first request, hash ids from 0."""
        self.hash_ids = HashIds()
        self.started_s: float | None = None
        # Lines after their timestamp, by request: their hash ids are this file's.
        self._tails: dict[tuple[str, bytes, bytes | None, str | None], str] = {}

    def line(self, observation: Observation) -> dict[str, Any] | None:
        """The trace line of ``observation``; None for a body that holds no prompt (not JSON,
        no messages), which a replay could not send either."""
        encoded = self.encoded(observation)
        return None if encoded is None else json.loads(encoded)

    def encoded(self, observation: Observation) -> bytes | None:
        """:meth:`line` as the file's bytes (a JSON line): the numbers written directly, as the
        writer does this for every request the proxy sees. A request seen before (the same body,
        answer and session: a response cache's hits) reuses its line after the timestamp."""
        arrived_s, path, raw_body, headers, answer = observation
        header_session = session_id(headers, {})
        key = (path, raw_body, answer, header_session)
        tail = self._tails.get(key)
        if tail is None:
            tail = self._tail(observation, header_session)
            if len(self._tails) >= MEMO_ENTRIES:
                self._tails.clear()
            self._tails[key] = tail
        if not tail:
            return None
        if self.started_s is None:
            self.started_s = arrived_s
        # ':.1f' rounds as round(ms, 1) does (both from the float's exact value), without a repr.
        return f'{{"timestamp":{max(0.0, (arrived_s - self.started_s) * 1000):.1f}{tail}'.encode()

    def _tail(self, observation: Observation, header_session: str | None) -> str:
        """Everything of the line after its timestamp ("" for a body that holds no prompt)."""
        prompt = self._prompt(observation.path, observation.raw_body)
        if prompt is None:
            return ""
        answered_prompt, answered_output = self._answer(observation.answer)
        # The server's count when the recorder's own is an estimate (no tokenizer).
        input_length = prompt.tokens if self.tokens.exact or answered_prompt is None else answered_prompt
        input_length = max(1, input_length)
        digests = prompt.digests[: -(-input_length // self.block_tokens)]
        output_length = max(1, answered_output or prompt.asked_output_tokens or 1)
        hash_ids = ",".join(map(str, self.hash_ids.ids_of_digests(digests)))
        tail = f',"input_length":{input_length},"output_length":{output_length},"hash_ids":[{hash_ids}]'
        session = header_session or prompt.body_session
        if session is not None:
            tail += ',"session_id":' + json.dumps(session, ensure_ascii=False)
        if prompt.text is not None:
            tail += "," + prompt.text
        return tail + "}\n"

    def _prompt(self, path: str, raw_body: bytes) -> _Prompt | None:
        memo_key = (path, raw_body)
        if memo_key in self._prompts:
            return self._prompts[memo_key]
        prompt = self._read_prompt(path, raw_body)
        if len(self._prompts) >= MEMO_ENTRIES:
            self._prompts.clear()
        self._prompts[memo_key] = prompt
        return prompt

    def _read_prompt(self, path: str, raw_body: bytes) -> _Prompt | None:
        try:
            body = json.loads(raw_body)
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        try:
            tokens = self.tokens.tokens(path, body)
        except Exception:  # a body the tokenizer or its chat template rejects is not recorded
            return None
        if not tokens:
            return None
        return _Prompt(
            tokens=len(tokens),
            digests=tuple(chained_block_digests(tokens, self.block_tokens)),
            asked_output_tokens=asked_output_tokens(body),
            body_session=session_id((), body),
            text=self._text(body) if self.record_text else None,
        )

    @staticmethod
    def _text(body: dict[str, Any]) -> str | None:
        if isinstance(body.get("messages"), list):
            return '"messages":' + json.dumps(body["messages"], ensure_ascii=False)
        if isinstance(body.get("prompt"), str):
            return '"input_text":' + json.dumps(body["prompt"], ensure_ascii=False)
        return None

    def _answer(self, answer: bytes | None) -> tuple[int | None, int | None]:
        if answer is None:
            return None, None
        found = self._outputs.get(answer)
        if found is None:
            tokens = answer_tokens(answer)
            found = (tokens.prompt, tokens.output)
            if len(self._outputs) >= MEMO_ENTRIES:
                self._outputs.clear()
            self._outputs[answer] = found
        return found
