"""The settings of one proxy instance."""

from __future__ import annotations

from dataclasses import dataclass

from services.cache_proxy.bodies import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES, OFF_LOOP_KEY_MIN_BYTES
from services.embeddings import DEFAULT_EMBEDDING_MODEL
from services.traces.blocks import MOONCAKE_BLOCK_TOKENS


@dataclass(frozen=True)
class ProxyConfig:
    """Settings of one proxy instance (see :func:`build_app`)."""

    upstream_url: str
    redis_url: str
    policy: str = "all"
    credentials: str = "bypass"
    credential_secret: bytes | None = None
    ttl_s: int | None = None
    namespace: str = "lab"
    single_flight: bool = True
    redis_timeout_s: float = 0.05
    upstream_timeout_s: float = 600.0
    breaker_failure_threshold: int = 3
    breaker_open_s: float = 2.0
    upstream_identity: str | None = None
    local_tier_entries: int = 4096
    local_tier_max_bytes: int = 64 * 1024 * 1024
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    off_loop_key_min_bytes: int = OFF_LOOP_KEY_MIN_BYTES
    # False: every request passes straight upstream (recording only; Redis is not used).
    cache: bool = True
    # The semantic tier (services.cache_proxy.semantic): a cosine threshold in (0, 1], or None
    # for the exact tier alone; what is embedded, the embedding model, the share of semantic
    # hits also asked of the upstream and compared (the measuring mode).
    semantic_similarity: float | None = None
    semantic_embed: str = "last_user_turn"
    semantic_model: str = DEFAULT_EMBEDDING_MODEL
    semantic_verify_fraction: float = 0.0
    # Trace recording (services.cache_proxy.recording): the file, None for none.
    record_trace: str | None = None
    record_text: bool = False
    record_rotate_mb: float | None = None
    record_block_tokens: int = MOONCAKE_BLOCK_TOKENS
    record_tokenizer: str | None = None
