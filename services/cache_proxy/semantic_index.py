"""The semantic tier's in-process vector index: the vectors of each group in a matrix of their own.

Only prompts of one group (:mod:`~services.cache_proxy.semantic_keys`: the same model, sampling,
max tokens, tools, upstream, namespace and credential) are ever compared, so each group keeps its
own vectors and a search never looks at another group's. A group is searched exhaustively (one
matrix-vector product: about 1 ms at 10,000 entries of 384 dimensions on one core here), which
finds the nearest prompt every time; HNSW's approximate search can miss it, which for a cache
would turn a hit into a miss with no trace of why. A group past :data:`EXACT_SEARCH_MAX_ENTRIES`
also gets a usearch HNSW graph and is searched through it. A usearch index reserves about 16 MB
when created, so one per group would cost that for every model and ``max_tokens`` seen: the
matrices cost 4 bytes a dimension and nothing more.

The index is rebuilt from Redis at start (:meth:`SemanticTier.rebuild
<services.cache_proxy.semantic.SemanticTier.rebuild>`); an entry that expired in Redis stays
here until a search finds it, and is dropped then.
"""

from __future__ import annotations

import numpy as np
from usearch.index import Index

EXACT_SEARCH_MAX_ENTRIES = 16_384
INITIAL_GROUP_ROWS = 8


class _Group:
    """One group's vectors: rows ``0..count`` of a matrix that doubles when full; a removed
    row is filled with the last one."""

    def __init__(self, dimensions: int) -> None:
        self.vectors = np.zeros((INITIAL_GROUP_ROWS, dimensions), dtype=np.float32)
        self.entry_keys: list[str] = []
        self.graph: Index | None = None  # past EXACT_SEARCH_MAX_ENTRIES: labels are row numbers' keys

    def add(self, entry_key: str, vector: np.ndarray) -> int:
        row = len(self.entry_keys)
        if row == self.vectors.shape[0]:
            grown = np.zeros((2 * row, self.vectors.shape[1]), dtype=np.float32)
            grown[:row] = self.vectors
            self.vectors = grown
        self.vectors[row] = vector
        self.entry_keys.append(entry_key)
        if self.graph is None and len(self.entry_keys) > EXACT_SEARCH_MAX_ENTRIES:
            self.graph = Index(ndim=self.vectors.shape[1], metric="cos", dtype="f32")
            self.graph.add(np.arange(len(self.entry_keys)), self.vectors[: len(self.entry_keys)])
        elif self.graph is not None:
            self.graph.add(row, vector)
        return row

    def remove(self, row: int) -> str | None:
        """Remove ``row``; the entry key moved into it (the former last row), if any."""
        last = len(self.entry_keys) - 1
        moved = None
        if row != last:
            self.vectors[row] = self.vectors[last]
            self.entry_keys[row] = self.entry_keys[last]
            moved = self.entry_keys[row]
        self.entry_keys.pop()
        if self.graph is not None:
            self.graph.remove(last)
            if moved is not None:
                self.graph.remove(row)
                self.graph.add(row, self.vectors[row])
        return moved

    def nearest(self, vector: np.ndarray) -> tuple[int, float]:
        if self.graph is not None:
            matches = self.graph.search(vector, 1)
            return int(matches.keys[0]), 1.0 - float(matches.distances[0])
        scores = self.vectors[: len(self.entry_keys)] @ vector
        row = int(np.argmax(scores))
        return row, float(scores[row])

    def memory_bytes(self) -> int:
        return int(self.vectors.nbytes) + (int(self.graph.memory_usage) if self.graph is not None else 0)


class VectorIndex:
    """Unit vectors by group; :meth:`nearest` finds a group's most similar entry."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._groups: dict[str, _Group] = {}
        self._where: dict[str, tuple[str, int]] = {}  # entry key -> (group, row)

    def __len__(self) -> int:
        return len(self._where)

    @property
    def groups(self) -> int:
        """How many groups hold at least one entry."""
        return len(self._groups)

    def memory_bytes(self) -> int:
        """The bytes the vectors (and any HNSW graph) take; the key maps not counted."""
        return sum(group.memory_bytes() for group in self._groups.values())

    def add(self, group: str, entry_key: str, vector: np.ndarray) -> None:
        """Add (or replace) ``entry_key``'s vector in ``group``."""
        if vector.shape != (self.dimensions,):
            raise ValueError(f"a vector of {vector.shape} in an index of {self.dimensions} dimensions")
        self.remove(entry_key)
        vectors = self._groups.get(group)
        if vectors is None:
            vectors = self._groups[group] = _Group(self.dimensions)
        self._where[entry_key] = (group, vectors.add(entry_key, vector))

    def remove(self, entry_key: str) -> None:
        """Forget ``entry_key`` (nothing when absent)."""
        found = self._where.pop(entry_key, None)
        if found is None:
            return
        group_key, row = found
        group = self._groups[group_key]
        moved = group.remove(row)
        if moved is not None:
            self._where[moved] = (group_key, row)
        if not group.entry_keys:
            del self._groups[group_key]

    def nearest(self, group: str, vector: np.ndarray) -> tuple[str, float] | None:
        """The entry of ``group`` most similar to ``vector`` and its cosine similarity; None
        when the group is empty."""
        vectors = self._groups.get(group)
        if vectors is None:
            return None
        row, similarity = vectors.nearest(vector)
        return vectors.entry_keys[row], similarity

    def clear(self) -> None:
        """Forget every entry (the namespace was flushed)."""
        self._groups.clear()
        self._where.clear()
