"""Synthetic prompts of a chosen length in tokens, with an optional shared prefix.

Lengths are counted with the model's own tokenizer *after* its chat template, so they are
what the server counts as prompt tokens (``usage.prompt_tokens``). A prompt is made of
words that are one token each (a space and lower-case letters), so its length is exact
and the first ``shared_prefix_tokens`` tokens are the same in every prompt (the template's
head and the system prompt count towards them). The output length is fixed through the
backend's own way of asking for it (``ignore_eos`` on vLLM, ``min_tokens`` otherwise).
Everything is drawn from the run's random seed: the same spec gives the same prompts.
"""

from __future__ import annotations

import json
import random
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import Field, model_validator

from lab.user_input.base import StrictModel
from lab.user_input.fields import OptionField
from lab.workloads import Messages, RunSettings, Workload, WorkloadError, register, write_sessions

if TYPE_CHECKING:
    from lab.backends import Backend

WORD_RE = re.compile(r" [a-z]{2,12}")
MARKER = "\u2063SYNTHETIC\u2063"


class SyntheticOptions(StrictModel):
    """The ``workload.synthetic`` section."""

    prompts: int = Field(default=100, ge=1, le=100_000, description="distinct prompts, replayed in turn")
    input_tokens_mean: int = Field(
        default=512, ge=16, le=1_000_000, description="prompt tokens, chat template included"
    )
    input_tokens_spread: int = Field(
        default=0, ge=0, le=1_000_000, description="standard deviation of the prompt tokens"
    )
    shared_prefix_tokens: int = Field(default=0, ge=0, le=1_000_000, description="leading tokens every prompt shares")
    fixed_output: bool = Field(default=True, description="every answer exactly max_tokens long")
    tokenizer: str | None = Field(
        default=None, description="tokenizer folder; the run's model (or the default) otherwise"
    )

    @model_validator(mode="after")
    def _prefix_fits(self) -> SyntheticOptions:
        if self.shared_prefix_tokens >= self.input_tokens_mean:
            raise ValueError("shared_prefix_tokens must be smaller than input_tokens_mean")
        return self


@lru_cache(maxsize=2)
def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


class TokenizerChoice(Protocol):
    """An options section that may name a tokenizer folder (synthetic, trace)."""

    tokenizer: str | None


def tokenizer_path(spec: RunSettings, options: TokenizerChoice) -> str:
    """The tokenizer to count with: the option, the run's model folder, else the default
    model's (a GGUF-only backend serves the same model converted there)."""
    if options.tokenizer:
        return options.tokenizer
    model = Path(spec.model)
    if (model / "tokenizer_config.json").is_file() or (model / "tokenizer.json").is_file():
        return str(model)
    from lab.settings import get_settings

    return get_settings().default_model


@lru_cache(maxsize=2)
def one_token_words(path: str) -> tuple[str, ...]:
    """Vocabulary entries that are a space and lower-case letters and encode back to one token."""
    tokenizer = load_tokenizer(path)
    words = []
    for token_id in range(tokenizer.vocab_size):
        text = tokenizer.decode([token_id])
        if WORD_RE.fullmatch(text) and tokenizer.encode(text, add_special_tokens=False) == [token_id]:
            words.append(text)
    if len(words) < 100:
        raise WorkloadError(f"the tokenizer at {path} has too few one-token words to build synthetic prompts")
    return tuple(words)


class PromptBuilder:
    """Builds chat messages whose templated length is an exact number of tokens."""

    def __init__(self, path: str, system_prompt: str | None) -> None:
        self.tokenizer = load_tokenizer(path)
        self.words = one_token_words(path)
        self.system_prompt = system_prompt

    def messages(self, content: str) -> Messages:
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": content}]

    def templated_tokens(self, content: str) -> int:
        ids = self.tokenizer.apply_chat_template(self.messages(content), add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # a BatchEncoding in newer transformers
            ids = ids["input_ids"]
        return len(ids)

    def head_tokens(self) -> int:
        """Tokens of the template before the user's content (system prompt included)."""
        text = self.tokenizer.apply_chat_template(self.messages(MARKER), add_generation_prompt=True, tokenize=False)
        return len(self.tokenizer.encode(text[: text.index(MARKER)], add_special_tokens=False))

    def build(self, prefix: list[str], total_tokens: int, rng: random.Random) -> tuple[Messages, int]:
        """Messages of ``total_tokens`` templated tokens starting with the ``prefix`` words."""
        overhead = self.templated_tokens("".join(prefix)) - len(prefix)
        body = [rng.choice(self.words) for _ in range(max(1, total_tokens - overhead - len(prefix)))]
        length = self.templated_tokens("".join(prefix + body))
        for _ in range(4):  # a word that merges with the template's tail: adjust and measure again
            if length == total_tokens:
                break
            change = total_tokens - length
            body = (
                body + [rng.choice(self.words) for _ in range(change)]
                if change > 0
                else body[: max(1, len(body) + change)]
            )
            length = self.templated_tokens("".join(prefix + body))
        return self.messages("".join(prefix + body)), length


def synthetic_sessions(spec: RunSettings, options: SyntheticOptions, backend: Backend) -> tuple[list[Any], list[int]]:
    """One-turn sessions (request objects) and the templated length of each prompt."""
    builder = PromptBuilder(tokenizer_path(spec, options), spec.workload.system_prompt)
    rng = random.Random(spec.random_seed)
    head = builder.head_tokens()
    prefix = [rng.choice(builder.words) for _ in range(max(0, options.shared_prefix_tokens - head))]
    extra = backend.fixed_output_fields(spec.max_tokens) if options.fixed_output else {}
    sessions, lengths = [], []
    for _ in range(options.prompts):
        wanted = round(rng.gauss(options.input_tokens_mean, options.input_tokens_spread))
        wanted = max(wanted, head + len(prefix) + 1)
        messages, length = builder.build(prefix, wanted, rng)
        sessions.append([{"messages": messages, **extra}])
        lengths.append(length)
    return sessions, lengths


@register
class Synthetic(Workload):
    name = "synthetic"
    label = "synthetic prompts (length in tokens, shared prefix)"
    script = "chat_replay.js"
    section = "synthetic"
    options_model = SyntheticOptions
    option_fields = (  # the tokenizer is left to the run's model in the form
        OptionField("synthetic.prompts", "Distinct prompts", step=1),
        OptionField("synthetic.input_tokens_mean", "Prompt tokens (mean, chat template included)", step=16),
        OptionField("synthetic.input_tokens_spread", "Prompt tokens (standard deviation)", step=8),
        OptionField("synthetic.shared_prefix_tokens", "Shared prefix tokens (every prompt starts alike)", step=16),
        OptionField("synthetic.fixed_output", "Every answer exactly max tokens long"),
    )

    def prepare(self, spec: RunSettings, run_dir: Path, backend: Backend) -> Path:
        options = spec.workload.options()
        sessions, lengths = synthetic_sessions(spec, options, backend)
        run_dir.mkdir(parents=True, exist_ok=True)
        # What was built, for a reader checking the lengths against the server's counts.
        (run_dir / "synthetic.json").write_text(
            json.dumps(
                {
                    "prompt_tokens_mean": sum(lengths) / len(lengths),
                    "prompt_tokens_min": min(lengths),
                    "prompt_tokens_max": max(lengths),
                    "tokenizer": tokenizer_path(spec, options),
                }
            )
        )
        return write_sessions(sessions, run_dir / "requests.json")

    def distinct_requests(self, spec: RunSettings) -> int | None:
        prompts: int | None = spec.workload.options().prompts
        return prompts
