"""Token ids to text deltas, stable across split UTF-8 characters, honouring stop strings."""

from __future__ import annotations

from typing import Any


class IncrementalDetokenizer:
    """Turns a stream of token ids into text deltas, honouring stop strings.

    Each delta is the difference between decoding a short window of recent tokens with and
    without the newest ones (the approach of TGI and vLLM), so the concatenated deltas are
    stable even when a token ends in the middle of a UTF-8 character. Text that might be the
    start of a stop string is held back until it is known not to be one.
    """

    def __init__(self, tokenizer: Any, stop_strings: tuple[str, ...] = ()) -> None:
        self._tokenizer = tokenizer
        self._stop_strings = stop_strings
        self._token_ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self._text = ""
        self._emitted_chars = 0
        self.stopped = False

    def _decode(self, token_ids: list[int]) -> str:
        text: str = self._tokenizer.decode(token_ids, skip_special_tokens=True)
        return text

    def _decode_new_text(self, *, final: bool) -> str:
        prefix_text = self._decode(self._token_ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._token_ids[self._prefix_offset :])
        if len(new_text) > len(prefix_text) and (final or not new_text.endswith("\ufffd")):
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._token_ids)
            return new_text[len(prefix_text) :]
        return ""

    def _held_back_chars(self) -> int:
        """Length of the longest tail of the text that could begin a stop string."""
        longest = 0
        for stop in self._stop_strings:
            for length in range(min(len(stop) - 1, len(self._text)), longest, -1):
                if self._text.endswith(stop[:length]):
                    longest = length
                    break
        return longest

    def push(self, token_ids: list[int]) -> str:
        """Add tokens; return the text that can be shown now (``stopped`` turns true on a stop string)."""
        if self.stopped:
            return ""
        self._token_ids.extend(token_ids)
        self._text += self._decode_new_text(final=False)
        if self._stop_strings:
            search_from = max(0, self._emitted_chars - max(len(stop) for stop in self._stop_strings))
            hits = [index for stop in self._stop_strings if (index := self._text.find(stop, search_from)) >= 0]
            if hits:
                self.stopped = True
                return self._take(min(hits))
        return self._take(len(self._text) - self._held_back_chars())

    def flush(self) -> str:
        """The text still held back, once generation has ended without a stop string."""
        if self.stopped:
            return ""
        self._text += self._decode_new_text(final=True)
        return self._take(len(self._text))

    def _take(self, end: int) -> str:
        delta = self._text[self._emitted_chars : end]
        self._emitted_chars = max(self._emitted_chars, end)
        return delta
