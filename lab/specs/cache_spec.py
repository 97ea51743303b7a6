"""The spec's ``cache`` section: the response cache in front of a ``+cache`` backend (its policy,
lifetime, single-flight, fill, HTTP server, trace recording and tier: exact, semantic or off)."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field

from lab.user_input.base import StrictModel
from services.cache_proxy.semantic_keys import EMBED_SCOPES
from services.cache_proxy.serving import SERVERS as PROXY_SERVERS
from services.embeddings import DEFAULT_EMBEDDING_MODEL

# The proxy's tiers (services.cache_proxy): see CacheSpec.tier.
CacheTier = Literal["exact", "semantic", "off"]
CACHE_TIERS: tuple[str, ...] = get_args(CacheTier)


class CacheSpec(StrictModel):
    """The response cache in front of the backend (``*+cache`` backends)."""

    policy: Literal["all", "deterministic"] = "all"
    ttl_s: int | None = Field(default=None, ge=1, le=30 * 86400)
    single_flight: bool = True
    # Measure the hit path in its steady state: the same load runs first, unmeasured, until the
    # cache has stored every distinct request of the workload, then the measured load starts.
    # Only for workloads with at most this many distinct requests (0: never), so one grid can
    # fill 50 prompts first and still start 1,000 prompts cold.
    fill_first_up_to: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="fill the cache first when there are at most this many distinct requests",
    )
    fill_timeout_s: float = Field(default=600, ge=1, le=7200, description="longest wait for the cache to fill")
    # uvicorn measured fastest under k6 here (docs/records/2026-12-02-cache-proxy-round-3-servers-and-load-clients.md);
    # granian, through ASGI or its own RSGI, stays an option for machines where the load generator has cores of its own.
    # The servers the proxy itself offers (Literal of that tuple: one list, the same one-line refusal).
    server: Literal[PROXY_SERVERS] = Field(default="uvicorn", description="the cache proxy's HTTP server")  # type: ignore[valid-type]  # a Literal of the tuple's values: pydantic reads it, mypy cannot
    # The proxy writes the traffic it sees as a Mooncake trace into the run's folder (replay it anywhere).
    record_trace: bool = Field(default=False, description="record the run's traffic as a trace (recorded-trace.jsonl)")

    # The proxy's tier (services.cache_proxy): exact answers identical requests; semantic also their
    # paraphrases, at or above ``similarity`` (services.cache_proxy.semantic); off sends every request
    # upstream through the proxy's hop (the no-cache baseline of a semantic sweep).
    tier: CacheTier = Field(default="exact", description="the response cache's tier")
    similarity: float = Field(
        default=0.9, gt=0, le=1, description="(semantic tier) the least cosine similarity of a paraphrase served"
    )
    embed: Literal[EMBED_SCOPES] = Field(  # type: ignore[valid-type]  # a Literal of the tuple's values: pydantic reads it, mypy cannot
        default="last_user_turn", description="(semantic tier) what is compared: the last user turn or the conversation"
    )
    embedding_model: str = Field(default=DEFAULT_EMBEDDING_MODEL, description="(semantic tier) the embedding model")
    verify_fraction: float = Field(
        default=0.0, ge=0, le=1, description="(semantic tier) share of semantic hits also asked upstream and compared"
    )

    def fills_first(self, distinct_requests: int | None) -> bool:
        return distinct_requests is not None and 0 < distinct_requests <= self.fill_first_up_to

    def tier_settings(self) -> dict[str, Any]:
        """The proxy's tier settings (``services.catalog.cache_proxy_config``'s keywords)."""
        if self.tier != "semantic":
            return {"tier": self.tier}
        return {
            "tier": self.tier,
            "similarity": self.similarity,
            "embed": self.embed,
            "embedding_model": self.embedding_model,
            "verify_fraction": self.verify_fraction,
        }
