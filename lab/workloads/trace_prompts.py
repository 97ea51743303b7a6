"""Prompts for a trace's hash ids: equal ids give equal token blocks, different ids different ones.

A prompt is the chat template around words that are one token each (the synthetic
workload's words, :func:`lab.workloads.synthetic.one_token_words`), so its templated length
is exact and token ``p`` of it lies in block ``p // block_tokens``. Each token position
takes its word from the block's own word list, drawn from the run's random seed and the block's
id: two prompts whose first k ids are equal are token-for-token equal over their first k
blocks (the template's head counts in block 0, the same in every prompt), which is the
sharing a prefix cache can see; a block with another id draws other words. Tokens past a
prompt's ids (a trace that gives fewer ids than its length needs) are words of the
request's own, so they repeat nowhere.
"""

from __future__ import annotations

import random
from functools import lru_cache

from lab.workloads import Messages
from lab.workloads.synthetic import PromptBuilder

# Word lists of this many blocks are kept: prompts share their leading blocks, so the same
# few are asked for again and again.
BLOCK_CACHE_SIZE = 4096


class TracePromptBuilder:
    """Builds the messages of a prompt of ``input_tokens`` templated tokens from its hash ids."""

    def __init__(self, tokenizer_path: str, system_prompt: str | None, *, block_tokens: int, random_seed: int) -> None:
        self.builder = PromptBuilder(tokenizer_path, system_prompt)
        self.block_tokens = block_tokens
        self.random_seed = random_seed
        self.head_tokens = self.builder.head_tokens()
        probe = "".join(self.builder.words[:8])
        # Template tokens around the user's words: the head before them and the tail after.
        self.overhead_tokens = self.builder.templated_tokens(probe) - 8
        self.block_words = lru_cache(maxsize=BLOCK_CACHE_SIZE)(self._block_words)

    @property
    def min_tokens(self) -> int:
        """The shortest prompt: the template and one word."""
        return self.overhead_tokens + 1

    def _block_words(self, key: tuple[object, ...]) -> tuple[str, ...]:
        rng = random.Random(repr((self.random_seed, *key)))
        return tuple(rng.choices(self.builder.words, k=self.block_tokens))

    def content(self, hash_ids: tuple[int, ...], input_tokens: int, request_index: int) -> str:
        """The user's words of a prompt of ``input_tokens`` templated tokens."""
        first = self.head_tokens
        last = max(first + 1, input_tokens - (self.overhead_tokens - self.head_tokens))
        words: list[str] = []
        for block in range(first // self.block_tokens, (last - 1) // self.block_tokens + 1):
            start = max(first, block * self.block_tokens) - block * self.block_tokens
            end = min(last, (block + 1) * self.block_tokens) - block * self.block_tokens
            key: tuple[object, ...] = (
                ("id", hash_ids[block]) if block < len(hash_ids) else ("own", request_index, block)
            )
            words.extend(self.block_words(key)[start:end])
        return "".join(words)

    def messages(self, hash_ids: tuple[int, ...], input_tokens: int, request_index: int) -> Messages:
        """The chat messages of the prompt (the system prompt, if any, is part of the template's head)."""
        return self.builder.messages(self.content(hash_ids, input_tokens, request_index))

    def templated_tokens(self, messages: Messages) -> int:
        """The prompt's length as the server counts it (for checks)."""
        return self.builder.templated_tokens(messages[-1]["content"])
