"""A seeded Mooncake trace of a stated shape (``python -m lab traces synth``): a realistic trace
to start from when no traffic has been recorded yet.

The shape:

- **arrivals**: ``rate_per_s * duration_s`` requests at uniformly random times over the
  duration (a Poisson process of that mean rate, its count fixed);
- **sessions**: each request belongs to one of ``sessions`` users, picked at random, so a
  session's turns spread over the duration; a session's first turn is its system prompt and an
  opening prompt, each later turn its previous prompt, the answer it got and a new message of
  the user's (a prefix that grows turn by turn);
- **popularity**: the system prompt (``system_prompts`` of them) and the opening prompt
  (``prompts``) are drawn by Zipf popularity (rank k with weight ``1 / k ** zipf_exponent``), so
  a few system prompts are shared by many users and popular openings repeat whole (with the
  same answer length): those repeats are what a response cache can answer.

Hash ids are chained and numbered as first seen (as the proxy records them,
:mod:`services.traces.blocks`): a block's id is given by the block before it and the content in
it; a prompt's last block has an id of its own unless the whole prompt repeats (a replay puts
the chat template's tail there), so a later turn shares its previous prompt's full blocks but
that one. Pure: the same shape and random seed give the same lines.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.traces.blocks import MOONCAKE_BLOCK_TOKENS

# A piece of prompt content: what it is (a system prompt, an opening, a session's answer or
# message) and its length in tokens.
Segment = tuple[tuple[object, ...], int]


class SynthShapeError(ValueError):
    """A shape no trace can be generated for; the message is one line."""


@dataclass(frozen=True)
class SynthShape:
    """What ``lab traces synth`` generates (see the module docstring)."""

    rate_per_s: float = 2.0
    duration_s: float = 300.0
    sessions: int = 200
    zipf_exponent: float = 1.1
    prompts: int = 100
    system_prompts: int = 4
    system_prompt_tokens: int = 1024
    prompt_tokens: int = 256
    output_tokens: int = 128
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    random_seed: int = 0

    def __post_init__(self) -> None:
        if not self.zipf_exponent > 0:
            raise SynthShapeError(
                f"the Zipf exponent must be more than 0 (0: every prompt equally likely), not {self.zipf_exponent:g}"
            )
        if not self.rate_per_s > 0:
            raise SynthShapeError(f"the rate must be more than 0 requests a second, not {self.rate_per_s:g}")
        if not self.duration_s > 0:
            raise SynthShapeError(f"the duration must be more than 0 s, not {self.duration_s:g}")
        if self.rate_per_s * self.duration_s < 0.5:
            raise SynthShapeError(
                f"{self.rate_per_s:g} requests a second for {self.duration_s:g} s is no request; raise either"
            )
        if self.rate_per_s * self.duration_s > 10_000_000:
            raise SynthShapeError("more than 10,000,000 requests: lower the rate or the duration")
        for name in ("sessions", "prompts", "system_prompts", "prompt_tokens", "output_tokens", "block_tokens"):
            if getattr(self, name) < 1:
                raise SynthShapeError(f"{name.replace('_', ' ')} must be at least 1, not {getattr(self, name)}")
        if self.system_prompt_tokens < 0:
            raise SynthShapeError(f"system prompt tokens must be at least 0, not {self.system_prompt_tokens}")


def zipf_weights(count: int, exponent: float) -> list[float]:
    """The popularity of ranks 1..count: ``1 / k ** exponent``."""
    return [1.0 / rank**exponent for rank in range(1, count + 1)]


@dataclass
class _Session:
    segments: list[Segment]
    turn: int = 0
    last_output_tokens: int = 0


@dataclass
class _BlockIds:
    """Chained ids numbered as first seen: a block's id is given by the id before it and its content."""

    ids: dict[tuple[object, ...], int] = field(default_factory=dict)

    def of(self, segments: Sequence[Segment], block_tokens: int) -> tuple[int, list[int]]:
        """The prompt's length in tokens and its hash ids."""
        blocks: list[list[tuple[object, ...]]] = [[]]  # (segment, first token, end) pieces per block
        filled = 0
        for key, length in segments:
            offset = 0
            while offset < length:
                if filled == block_tokens:
                    blocks.append([])
                    filled = 0
                take = min(length - offset, block_tokens - filled)
                blocks[-1].append((key, offset, offset + take))
                offset += take
                filled += take
        ids: list[int] = []
        previous = -1
        for index, block in enumerate(blocks):
            # The last block differs from the same content continued: a replay ends it with the template's tail.
            content = (previous, tuple(block), index == len(blocks) - 1)
            previous = self.ids.setdefault(content, len(self.ids))
            ids.append(previous)
        return sum(length for _, length in segments), ids


def _length(rng: random.Random, mean: int) -> int:
    """A length around ``mean``: uniform between half and one and a half of it."""
    return max(1, round(rng.uniform(0.5, 1.5) * mean))


def synth_lines(shape: SynthShape) -> list[dict[str, object]]:
    """The trace's lines (see the module docstring), in time order."""
    rng = random.Random(shape.random_seed)
    count = max(1, round(shape.rate_per_s * shape.duration_s))
    times_ms = sorted(rng.uniform(0, shape.duration_s * 1000) for _ in range(count))
    openings = [(_length(rng, shape.prompt_tokens), _length(rng, shape.output_tokens)) for _ in range(shape.prompts)]
    prompt_weights = zipf_weights(shape.prompts, shape.zipf_exponent)
    system_weights = zipf_weights(shape.system_prompts, shape.zipf_exponent)
    sessions: dict[int, _Session] = {}
    block_ids = _BlockIds()
    lines: list[dict[str, object]] = []
    for time_ms in times_ms:
        number = rng.randrange(shape.sessions)
        session = sessions.get(number)
        if session is None:
            system = rng.choices(range(shape.system_prompts), system_weights)[0]
            opening = rng.choices(range(shape.prompts), prompt_weights)[0]
            segments: list[Segment] = [(("opening", system, opening), openings[opening][0])]
            if shape.system_prompt_tokens:
                segments.insert(0, (("system", system), shape.system_prompt_tokens))
            session = sessions[number] = _Session(segments)
            output_length = openings[opening][1]
        else:
            session.segments += [
                (("answer", number, session.turn), session.last_output_tokens),
                (("message", number, session.turn), _length(rng, shape.prompt_tokens)),
            ]
            output_length = _length(rng, shape.output_tokens)
        input_length, hash_ids = block_ids.of(session.segments, shape.block_tokens)
        session.turn += 1
        session.last_output_tokens = output_length
        lines.append(
            {
                "timestamp": round(time_ms),
                "input_length": input_length,
                "output_length": output_length,
                "hash_ids": hash_ids,
                "session_id": f"session-{number}",
            }
        )
    return lines


def synth_text(shape: SynthShape) -> str:
    """The trace as the file's text (one JSON object a line)."""
    return "".join(json.dumps(line) + "\n" for line in synth_lines(shape))
