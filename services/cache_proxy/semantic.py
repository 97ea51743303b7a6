"""The semantic tier: a stored answer served for a paraphrase (``--cache semantic``).

After an exact miss the request's text (:mod:`~services.cache_proxy.semantic_keys`: the last
user turn or the whole conversation) is embedded (:mod:`services.embeddings`) and the nearest
stored prompt *of its group* (everything else equal: model, sampling, max tokens, tools,
upstream, namespace, credential) is looked up in the in-process index
(:mod:`~services.cache_proxy.semantic_index`). At or above ``--similarity`` its stored answer
is served with ``X-Cache: SEMANTIC`` and ``X-Cache-Similarity``; below, the request is a miss
and, once its answer is stored, its vector is stored beside the entry (one pipelined write,
the same TTL) and indexed.

The exact tier's rules hold because the semantic tier only ever *reads* entries the exact tier
stored (errors, cut streams and ``no-store`` answers never are) and only adds a vector when the
exact tier stored the answer; a ``no-store`` request never reaches it, a ``no-cache`` one is
embedded (its answer is stored) but not looked up. Single-flight stays exact: two paraphrases
in flight at once both go upstream.

Fail-open: a model that fails to embed or an index that fails to search is logged once and the
request goes on as an exact miss (``lab_cache_semantic_errors_total`` counts them).

Measuring mode (``--semantic-verify-fraction``): that share of semantic hits is also asked of
the upstream after the hit was served, off the request's path, and the two answers compared:
equal text (meaningful at temperature 0) and the cosine similarity of their embeddings. A hit
whose text differs is a false hit (``lab_cache_semantic_false_hits_total``); ``GET
/cache/semantic`` shows the settings, the index and the last verifications.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.cache_proxy.keys import parse_keyable_body
from services.cache_proxy.policy import XCache
from services.cache_proxy.resp import PipelinedRedis, RedisUnavailable, RedisWrongType
from services.cache_proxy.responses import PreparedHit, Scope, prepared_hit
from services.cache_proxy.semantic_index import VectorIndex
from services.cache_proxy.semantic_keys import (
    VectorRecord,
    answer_text,
    decode_vector_record,
    encode_vector_record,
    semantic_request,
    vector_key,
    vector_prefix,
)
from services.cache_proxy.upstream import upstream_request
from services.embeddings import Embedder, EmbeddingModelError, cosine, load_embedder

LOGGER = logging.getLogger(__name__)

# Embedding and search time buckets (seconds): the lab reads p50 and p99 from them.
SEMANTIC_LATENCY_BUCKETS = (
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.2,
    0.5,
    1.0,
)
ANSWER_SIMILARITY_BUCKETS = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0)
# Misses whose vector waits for their answer to be stored; cleared when full (a miss whose
# answer was never stored leaves its record here).
PENDING_VECTORS_MAX = 4096
MAX_VERIFICATIONS_IN_FLIGHT = 4
RECENT_VERIFICATIONS_KEPT = 50
REBUILD_RETRY_S = 5.0


class SemanticMetrics:
    """The semantic tier's figures in the proxy's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, registry=registry)

        def seconds(name: str, documentation: str) -> Histogram:
            return Histogram(name, documentation, buckets=SEMANTIC_LATENCY_BUCKETS, registry=registry)

        self.hits = counter("lab_cache_semantic_hits", "Exact misses answered with a similar prompt's stored answer.")
        self.lookups = counter("lab_cache_semantic_lookups", "Exact misses searched in the semantic index.")
        self.errors = counter(
            "lab_cache_semantic_errors", "Embeddings or searches that failed: served as exact misses."
        )
        self.verified = counter("lab_cache_semantic_verified", "Semantic hits also asked of the upstream and compared.")
        self.false_hits = counter("lab_cache_semantic_false_hits", "Verified semantic hits whose text differed.")
        self.verify_skipped = counter(
            "lab_cache_semantic_verify_skipped", "Sampled hits not verified (too many in flight, or upstream failed)."
        )
        self.answer_similarity = Histogram(
            "lab_cache_semantic_answer_similarity",
            "Cosine similarity of the served and the fresh answer's embeddings, per verified hit.",
            buckets=ANSWER_SIMILARITY_BUCKETS,
            registry=registry,
        )
        self.embedding = seconds(
            "lab_cache_embedding_seconds", "Time the model took to embed one request's text (no wait for the thread)."
        )
        self.search = seconds("lab_cache_semantic_search_seconds", "Time to search the group's index.")
        self.hit_path = seconds(
            "lab_cache_semantic_hit_path_seconds",
            "Embedding (its wait for the embedding thread included) plus search on requests answered SEMANTIC.",
        )
        self.miss_path = seconds(
            "lab_cache_semantic_miss_path_seconds",
            "Embedding (its wait included) plus search added to requests that then went upstream.",
        )
        self.index_entries = Gauge("lab_cache_semantic_index_entries", "Vectors in the index.", registry=registry)


def _timed_embedding(embedder: Embedder, text: str) -> tuple[Any, float]:
    """``text``'s vector and the seconds the model took (in the embedding thread)."""
    started_at = time.perf_counter()
    return embedder.embed_one(text), time.perf_counter() - started_at


@dataclass
class SemanticHit:
    """A semantic hit ready to send, and what its verification needs."""

    prepared: PreparedHit
    similarity: float
    entry_key: str
    text: str


@dataclass(frozen=True)
class SemanticSettings:
    """The tier's settings (from :class:`~services.cache_proxy.config.ProxyConfig`)."""

    similarity: float
    embed: str
    model: str
    verify_fraction: float
    namespace: str
    upstream_url: str
    upstream_identity: str


class SemanticTier:
    """See the module docstring. ``open`` with the proxy's Redis and httpx client."""

    def __init__(self, settings: SemanticSettings, registry: CollectorRegistry) -> None:
        self.settings = settings
        self.metrics = SemanticMetrics(registry)
        self.embedder: Embedder | None = None
        self.index: VectorIndex | None = None
        self.redis: PipelinedRedis | None = None
        self.http: httpx.AsyncClient | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedding")
        self._pending: dict[str, VectorRecord] = {}
        self._rebuilt = False
        self._rebuild_tried_at = -REBUILD_RETRY_S
        self._failure_told = False
        self._rng = random.Random(0)
        self._verifications: set[asyncio.Task[None]] = set()
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_VERIFICATIONS_KEPT)

    # -- lifecycle --------------------------------------------------------------------

    async def open(self, redis: PipelinedRedis | None, http: httpx.AsyncClient | None) -> None:
        """Load the model (once per process) and rebuild the index from Redis."""
        self.redis, self.http = redis, http
        if self.embedder is None:
            try:
                self.embedder = await asyncio.get_running_loop().run_in_executor(
                    self._executor, load_embedder, self.settings.model
                )
            except EmbeddingModelError as error:
                self._fail(error)
                return
            self.index = VectorIndex(self.embedder.dimensions)
        await self.rebuild()

    def close(self) -> None:
        """Stop the verifications in flight and the embedding thread."""
        for task in self._verifications:
            task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def clear(self) -> None:
        """The namespace was flushed: forget every vector (Redis's went with the entries)."""
        if self.index is not None:
            self.index.clear()
            self.metrics.index_entries.set(0)
        self._pending.clear()

    async def rebuild(self) -> None:
        """Index every vector of the namespace stored in Redis (SCAN, then MGET in batches);
        a Redis that does not answer is tried again on a later request."""
        if self.redis is None or self.index is None or self.embedder is None:
            return
        self._rebuild_tried_at = time.monotonic()
        started_at, found, cursor = time.perf_counter(), 0, b"0"
        pattern = vector_prefix(self.settings.namespace).replace("*", "\\*").replace("?", "\\?") + "*"
        try:
            while True:
                cursor, keys = await self.redis.execute(b"SCAN", cursor, b"MATCH", pattern, b"COUNT", 1000, timeout_s=5)
                if keys:
                    for value in await self.redis.execute(b"MGET", *keys, timeout_s=5):
                        record = decode_vector_record(value) if value else None
                        if record is not None and self._usable(record):
                            self.index.add(record.group, record.entry_key, record.vector)
                            found += 1
                if cursor == b"0":
                    break
        except RedisUnavailable as error:
            LOGGER.warning("semantic index not rebuilt (Redis unavailable: %s); tried again on a later request", error)
            return
        self._rebuilt = True
        self.metrics.index_entries.set(len(self.index))
        LOGGER.info("semantic index rebuilt: %d vectors in %.2f s", found, time.perf_counter() - started_at)

    def _usable(self, record: VectorRecord) -> bool:
        assert self.embedder is not None
        return record.model == self.settings.model and record.vector.shape == (self.embedder.dimensions,)

    def _fail(self, error: BaseException) -> None:
        self.metrics.errors.inc()
        if not self._failure_told:
            self._failure_told = True
            LOGGER.warning(
                "semantic tier unavailable (%s: %s): requests go on as exact misses; said once, "
                "lab_cache_semantic_errors_total counts them",
                type(error).__name__,
                str(error).splitlines()[0][:200] if str(error) else "",
            )

    # -- the request path -------------------------------------------------------------

    async def find(
        self, scope: Scope, raw_body: bytes, entry_key: str, requester: str | None, *, lookup: bool, streaming: bool
    ) -> SemanticHit | None:
        """After an exact miss: the semantic hit to serve, or None. On a miss (and on a
        ``no-cache`` refresh, ``lookup`` False) the request's vector waits for its answer to
        be stored under ``entry_key``."""
        if self.embedder is None or self.index is None:
            self.metrics.errors.inc()
            return None
        if not self._rebuilt and time.monotonic() - self._rebuild_tried_at > REBUILD_RETRY_S:
            await self.rebuild()
        started_at = time.perf_counter()
        try:
            request = semantic_request(
                parse_keyable_body(raw_body),
                path=scope["path"],
                upstream_identity=self.settings.upstream_identity,
                namespace=self.settings.namespace,
                requester=requester,
                embed=self.settings.embed,
            )
            if request is None:
                return None
            vector, nearest = await self._embed_and_search(request.group, request.text, lookup=lookup)
        except Exception as error:  # any failure of the model or the index: fail open
            self._fail(error)
            return None
        if nearest is not None and nearest[1] >= self.settings.similarity:
            hit = await self._read_hit(nearest[0], nearest[1], streaming, request.text)
            if hit is not None:
                self.metrics.hits.inc()
                self.metrics.hit_path.observe(time.perf_counter() - started_at)
                return hit
        self.metrics.miss_path.observe(time.perf_counter() - started_at)
        if len(self._pending) >= PENDING_VECTORS_MAX:
            self._pending.clear()
        self._pending[entry_key] = VectorRecord(request.group, entry_key, self.settings.model, vector)
        return None

    async def _embed_and_search(self, group: str, text: str, *, lookup: bool) -> tuple[Any, tuple[str, float] | None]:
        """``text``'s vector (embedded in the embedding thread) and, when ``lookup``, the nearest
        entry of ``group`` with its similarity."""
        assert self.embedder is not None and self.index is not None
        vector, embedding_s = await asyncio.get_running_loop().run_in_executor(
            self._executor, _timed_embedding, self.embedder, text
        )
        self.metrics.embedding.observe(embedding_s)  # the model's time; the paths' include the wait for the thread
        if not lookup:
            return vector, None
        searched_at = time.perf_counter()
        nearest = self.index.nearest(group, vector)
        self.metrics.lookups.inc()
        self.metrics.search.observe(time.perf_counter() - searched_at)
        return vector, nearest

    async def _read_hit(self, entry_key: str, similarity: float, streaming: bool, text: str) -> SemanticHit | None:
        """The stored answer of ``entry_key`` as a SEMANTIC hit; None (and the vector dropped)
        when the entry is gone or cannot be served to this request."""
        assert self.redis is not None and self.index is not None
        try:
            stored = await self.redis.execute(b"GET", entry_key)
        except RedisUnavailable:
            return None
        except RedisWrongType:  # another type under the key: not an entry to serve
            stored = None
        prepared = prepared_hit(stored) if isinstance(stored, bytes) else None
        if prepared is None or prepared[2] is not streaming:
            self.index.remove(entry_key)  # expired with its entry, or replaced by a bad value
            self.metrics.index_entries.set(len(self.index))
            return None
        headers = [(name, value) for name, value in prepared[0] if name != b"x-cache"]
        headers += [(b"x-cache", XCache.SEMANTIC.value), (b"x-cache-similarity", b"%.4f" % similarity)]
        return SemanticHit((headers, prepared[1], prepared[2]), similarity, entry_key, text)

    async def store(self, redis: PipelinedRedis, key: str, value: bytes, ttl_s: int | None) -> None:
        """Store an answer, and its request's vector beside it when one waits (one pipelined
        write, the same TTL); raise :class:`RedisUnavailable`."""
        record = self._pending.pop(key, None)
        if record is None:
            await redis.set(key, value, ttl_s=ttl_s)
            return
        expiry: tuple[bytes | int, ...] = (b"EX", ttl_s) if ttl_s else ()
        vector_value = encode_vector_record(record)
        await redis.execute_pipeline(
            (b"SET", key, value, *expiry), (b"SET", vector_key(key, self.settings.namespace), vector_value, *expiry)
        )
        if self.index is not None:
            self.index.add(record.group, record.entry_key, record.vector)
            self.metrics.index_entries.set(len(self.index))

    # -- measuring mode ---------------------------------------------------------------

    def served(self, hit: SemanticHit, scope: Scope, raw_body: bytes) -> None:
        """A semantic hit was sent: verify it against the upstream when it is sampled."""
        fraction = self.settings.verify_fraction
        if fraction <= 0 or self.http is None or self._rng.random() >= fraction:
            return
        if len(self._verifications) >= MAX_VERIFICATIONS_IN_FLIGHT:
            self.metrics.verify_skipped.inc()
            return
        request = upstream_request(self.http, self.settings.upstream_url, scope, raw_body)
        task = asyncio.ensure_future(self._verify(hit, request))
        self._verifications.add(task)
        task.add_done_callback(self._verifications.discard)

    async def _verify(self, hit: SemanticHit, request: httpx.Request) -> None:
        assert self.http is not None and self.embedder is not None
        try:
            response = await self.http.send(request)
        except httpx.HTTPError:
            self.metrics.verify_skipped.inc()
            return
        is_stream = response.headers.get("content-type", "").startswith("text/event-stream")
        fresh = answer_text(response.content, is_stream=is_stream) if response.status_code == 200 else None
        served = answer_text(hit.prepared[1], is_stream=hit.prepared[2])
        if fresh is None or served is None:
            self.metrics.verify_skipped.inc()
            return
        vectors = await asyncio.get_running_loop().run_in_executor(self._executor, self.embedder.embed, [served, fresh])
        equal = served == fresh
        # Two empty answers are equal; an empty and a non-empty one share nothing.
        answer_similarity = cosine(vectors[0], vectors[1]) if served.strip() and fresh.strip() else float(equal)
        self.metrics.verified.inc()
        self.metrics.answer_similarity.observe(answer_similarity)
        if not equal:
            self.metrics.false_hits.inc()
        self.recent.append(
            {
                "prompt": hit.text[:300],
                "similarity": round(hit.similarity, 4),
                "served": served[:300],
                "fresh": fresh[:300],
                "equal": equal,
                "answer_similarity": round(answer_similarity, 4),
            }
        )

    def status(self) -> dict[str, Any]:
        """What ``GET /cache/semantic`` answers: settings, the index, the last verifications."""
        index = self.index
        return {
            "similarity": self.settings.similarity,
            "embed": self.settings.embed,
            "model": self.settings.model,
            "verify_fraction": self.settings.verify_fraction,
            "available": self.embedder is not None,
            "index": {
                "entries": len(index) if index is not None else 0,
                "groups": index.groups if index is not None else 0,
                "memory_bytes": index.memory_bytes() if index is not None else 0,
            },
            "recent_verifications": list(self.recent),
        }
