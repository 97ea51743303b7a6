"""A synthetic paraphrase trace: questions asked several ways, and near-misses that are not the same.

Each *question* is one fact about one subject ("the capital of France"); each is asked in
``phrasings`` wordings drawn from its family's templates ("What is the capital of France?",
"Which city is France's capital?"). Subjects of one family share their templates, so "the
capital of France" and "the capital of Germany" are worded alike and embed close together
(about 0.66 under all-MiniLM-L6-v2) while their answers differ: the near-misses a semantic cache
serves wrongly when its threshold is too low. The requests go in an order drawn from the run's
random seed, one request a session, replayed in turn (k6's ``chat_replay.js``): one pass is
``questions x phrasings`` requests.

What a semantic cache can gain here is known by construction: of each question's ``phrasings``
requests the first must miss, the others may hit (:func:`paraphrase_ceiling`); an exact cache
gains nothing on the first pass.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from lab.user_input.base import StrictModel
from lab.user_input.fields import OptionField
from lab.workloads import RunSettings, Workload, register, write_sessions

if TYPE_CHECKING:
    from lab.backends import Backend

# (templates, subjects): every template of a family asks the same thing of its subject.
FAMILIES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (
        (
            "What is the capital of {}?",
            "Which city is the capital of {}?",
            "Tell me the capital city of {}.",
            "What city is {}'s capital?",
        ),
        ("France", "Germany", "Spain", "Italy", "Japan", "Canada", "Egypt", "Brazil", "Kenya", "Norway"),
    ),
    (
        (
            "How many legs does {} have?",
            "What is the number of legs {} has?",
            "How many legs has {} got?",
            "Count the legs of {}.",
        ),
        (
            "a spider",
            "a dog",
            "a bird",
            "an ant",
            "a crab",
            "a horse",
            "an octopus",
            "a snake",
            "a chicken",
            "a beetle",
        ),
    ),
    (
        (
            "Translate the word '{}' into French.",
            "What is '{}' in French?",
            "How do you say '{}' in French?",
            "Give the French word for '{}'.",
        ),
        ("house", "water", "bread", "friend", "book", "tree", "cheese", "window", "river", "night"),
    ),
    (
        (
            "What colour is {}?",
            "Which colour is {} usually?",
            "Tell me the usual colour of {}.",
            "What is the colour of {}?",
        ),
        ("grass", "the sky", "snow", "a banana", "coal", "a ripe tomato", "milk", "an orange", "blood", "the sea"),
    ),
    (
        ("Who wrote {}?", "Who is the author of {}?", "Which writer wrote {}?", "Name the author of {}."),
        (
            "Hamlet",
            "Don Quixote",
            "War and Peace",
            "Pride and Prejudice",
            "The Odyssey",
            "Moby-Dick",
            "Faust",
            "Les Miserables",
            "Ulysses",
            "The Trial",
        ),
    ),
)
MAX_QUESTIONS = sum(len(subjects) for _, subjects in FAMILIES)
MAX_PHRASINGS = min(len(templates) for templates, _ in FAMILIES)


class ParaphraseOptions(StrictModel):
    """The ``workload.paraphrases`` section."""

    questions: int = Field(default=20, ge=1, le=MAX_QUESTIONS, description="distinct questions (meanings)")
    phrasings: int = Field(default=3, ge=1, le=MAX_PHRASINGS, description="wordings of each question")


def paraphrase_requests(*, questions: int, phrasings: int, random_seed: int) -> list[tuple[int, str]]:
    """The trace: (question number, wording) pairs in the order they are sent. Questions are
    taken family by family in turn (so near-misses are there from the first few); the order is
    drawn from ``random_seed``, with each question's first wording anywhere in it."""
    subjects = [[(templates, subject) for subject in family_subjects] for templates, family_subjects in FAMILIES]
    chosen = [pair for pair in itertools.chain.from_iterable(itertools.zip_longest(*subjects)) if pair][:questions]
    rng = random.Random(random_seed)
    requests = [
        (number, template.format(subject))
        for number, (templates, subject) in enumerate(chosen)
        for template in rng.sample(templates, phrasings)
    ]
    rng.shuffle(requests)
    return requests


def paraphrase_ceiling(requests: list[tuple[int, str]]) -> float:
    """The share of requests a perfect semantic cache answers: every request after its
    question's first."""
    first_seen = {number for number, _ in requests}
    return (len(requests) - len(first_seen)) / len(requests) if requests else 0.0


@register
class Paraphrases(Workload):
    name = "paraphrases"
    label = "paraphrases (synthetic)"
    script = "chat_replay.js"
    section = "paraphrases"
    options_model = ParaphraseOptions
    option_fields = (
        OptionField("paraphrases.questions", "Distinct questions", step=1),
        OptionField("paraphrases.phrasings", "Wordings of each", step=1),
    )

    def prepare(self, spec: RunSettings, run_dir: Path, backend: Backend) -> Path:
        options = spec.workload.options()
        requests = paraphrase_requests(
            questions=options.questions, phrasings=options.phrasings, random_seed=spec.random_seed
        )
        sessions = [[[{"role": "user", "content": text}]] for _, text in requests]
        return write_sessions(sessions, run_dir / "requests.json")

    def distinct_requests(self, spec: RunSettings) -> int | None:
        options = spec.workload.options()
        return int(options.questions * options.phrasings)

    def preview_lines(self, spec: RunSettings) -> list[str]:
        options = spec.workload.options()
        requests = paraphrase_requests(
            questions=options.questions, phrasings=options.phrasings, random_seed=spec.random_seed
        )
        return [
            f"{len(requests)} requests a pass: {options.questions} questions, {options.phrasings} wordings each; "
            f"a perfect semantic cache answers {paraphrase_ceiling(requests):.0%} of a first pass, an exact one 0%"
        ]


def paraphrase_trace_text(
    *, questions: int, phrasings: int, random_seed: int, rate_per_s: float, output_tokens: int
) -> str:
    """The paraphrase requests as a trace file (JSONL: ``timestamp`` in ms at ``rate_per_s``,
    ``input_text``, ``output_length``), for the trace workload and ``lab traces ceilings``."""
    requests = paraphrase_requests(questions=questions, phrasings=phrasings, random_seed=random_seed)
    lines = [
        json.dumps({"timestamp": round(index * 1000 / rate_per_s), "input_text": text, "output_length": output_tokens})
        for index, (_, text) in enumerate(requests)
    ]
    return "\n".join(lines) + "\n"
