"""The canonical cache key of an OpenAI-compatible request.

The seed's proxy keyed its cache on the SHA-256 of the raw request body, so two requests
that differ only in JSON key order or whitespace missed each other, and the same body sent
to two different upstreams shared one entry. Here the key is the SHA-256 of a canonical
JSON document (sorted keys, separators ``(",", ":")``) holding:

- a key-format version (bump :data:`KEY_FORMAT_VERSION` when this layout changes, so old
  entries are never read with a new meaning),
- the namespace (one Redis can hold several labs' caches),
- the upstream's identity (its normalised base URL unless given),
- the request path,
- every request field that can change the answer.

"Every field that can change the answer" is the whole body minus the few fields known not
to (:data:`FIELDS_NOT_IN_KEY`): an unknown or future field (``tools``, ``logit_bias``,
``response_format``, ...) is therefore in the key by default, which can only cost a miss,
never serve a wrong answer. ``stream`` and ``stream_options`` stay in the key because a
stream and a plain answer are stored in different shapes.

Numbers are normalised so ``0`` and ``0.0`` (and ``1`` and ``1.0``) are the same value.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

KEY_FORMAT_VERSION = 1

# Fields that never change the generated answer: an end-user id for abuse tracking.
FIELDS_NOT_IN_KEY: frozenset[str] = frozenset({"user"})

# OpenAI's default sampling temperature when the field is absent.
DEFAULT_TEMPERATURE = 1.0


def normalize_upstream_identity(upstream_url: str) -> str:
    """Return a stable identity for an upstream base URL (lower-case scheme/host, no
    trailing slash)."""
    url = upstream_url.strip().rstrip("/")
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}://{host.lower()}{slash}{path}"


def _normalize_value(value: Any) -> Any:
    """Recursively make equal JSON values equal Python values (1.0 -> 1)."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return int(value)
        return value
    if isinstance(value, Mapping):
        return {str(key): _normalize_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalize_value(item) for item in value]
    return value


def canonical_json(value: Any) -> str:
    """Serialise ``value`` canonically: sorted keys, no whitespace, numbers normalised."""
    return json.dumps(
        _normalize_value(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def answer_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields that can change the answer (the body minus
    :data:`FIELDS_NOT_IN_KEY`)."""
    return {key: value for key, value in body.items() if key not in FIELDS_NOT_IN_KEY}


def key_prefix(namespace: str) -> str:
    """The Redis key prefix of one namespace's entries (used to flush just them)."""
    return f"{namespace}:resp:v{KEY_FORMAT_VERSION}:"


def cache_key(*, upstream_identity: str, path: str, body: Mapping[str, Any], namespace: str = "lab") -> str:
    """Return the Redis key for ``body`` sent to ``path`` on ``upstream_identity``.

    The key is ``"{namespace}:resp:v{version}:{sha256 hex}"``. Requests that differ only
    in key order, whitespace or ``1`` vs ``1.0`` get the same key; a different model,
    ``max_tokens``, upstream, path or namespace gets a different one.
    """
    document = {
        "format": KEY_FORMAT_VERSION,
        "namespace": namespace,
        "upstream": upstream_identity,
        "path": path,
        "request": answer_fields(body),
    }
    digest = hashlib.sha256(canonical_json(document).encode("utf-8")).hexdigest()
    return key_prefix(namespace) + digest


def is_deterministic_request(body: Mapping[str, Any]) -> bool:
    """True when the request asks for a reproducible answer: temperature 0 or a seed
    given, and one choice (``n`` absent or 1)."""
    n_choices = body.get("n")
    if n_choices is not None and n_choices != 1:
        return False
    if body.get("seed") is not None:
        return True
    temperature = body.get("temperature", DEFAULT_TEMPERATURE)
    if temperature is None:
        temperature = DEFAULT_TEMPERATURE
    try:
        return float(temperature) == 0.0
    except (TypeError, ValueError):
        return False
