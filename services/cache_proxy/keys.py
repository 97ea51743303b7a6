"""The canonical cache key of an OpenAI-compatible request.

The seed's proxy keyed its cache on the SHA-256 of the raw request body, so two requests
that differ only in JSON key order or whitespace missed each other, and the same body sent
to two different upstreams shared one entry. Here the key is the SHA-256 of a canonical
JSON document (sorted keys, separators ``(",", ":")``) holding:

- a key-format version (bump :data:`KEY_FORMAT_VERSION` when this layout changes, so old
  entries are never read with a new meaning),
- the namespace (one Redis can hold several labs' caches),
- the upstream's identity (its normalised base URL unless given),
- the request path and its query string,
- who is asking: a keyed HMAC of the request's credentials (:func:`requester_fingerprint`),
  or nothing for a request without credentials,
- every request field that can change the answer.

"Every field that can change the answer" is the whole body minus the few fields known not
to (:data:`FIELDS_NOT_IN_KEY`): an unknown or future field (``tools``, ``logit_bias``,
``response_format``, ...) is therefore in the key by default, which can only cost a miss,
never serve a wrong answer. ``stream`` and ``stream_options`` stay in the key because a
stream and a plain answer are stored in different shapes.

Numbers are normalised so ``0`` and ``0.0`` (and ``1`` and ``1.0``) are the same value.

A body is keyed only when its meaning is unambiguous (:func:`parse_keyable_body`):
duplicate object keys (parsers disagree on which one wins, so two upstreams could read
two different requests behind one key), ``NaN``/``Infinity``/overflowing numbers, lone
surrogates and very deep nesting raise :class:`UnkeyableBody`, and the proxy passes such
a body through uncached.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

# 2: the query string and the requester's credential fingerprint joined the key.
KEY_FORMAT_VERSION = 2

# Fields that never change the generated answer: an end-user id for abuse tracking.
FIELDS_NOT_IN_KEY: frozenset[str] = frozenset({"user"})

# Deeper bodies are not keyed (real chat bodies, tools' JSON schemas included, stay far below).
MAX_KEYABLE_NESTING_DEPTH = 64

# Request headers that say who is asking. Besides these names, any header whose name
# contains one of CREDENTIAL_HEADER_NAME_PARTS counts: guessing too wide only splits or
# bypasses the cache (a miss), guessing too narrow could serve one user's answer to another.
CREDENTIAL_HEADER_NAMES: frozenset[bytes] = frozenset(
    {
        b"authorization",
        b"proxy-authorization",
        b"cookie",
        b"api-key",
        b"x-api-key",
        b"openai-organization",
        b"openai-project",
        b"x-forwarded-user",
        b"x-remote-user",
        b"remote-user",
        b"x-forwarded-email",
    }
)
CREDENTIAL_HEADER_NAME_PARTS: tuple[bytes, ...] = (
    b"auth",
    b"key",
    b"token",
    b"secret",
    b"cookie",
    b"session",
    b"passw",
    b"credential",
    b"signature",
)


class UnkeyableBody(ValueError):
    """A request body the proxy cannot key safely; the message says why."""


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
        _normalize_value(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def answer_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields that can change the answer (the body minus
    :data:`FIELDS_NOT_IN_KEY`)."""
    return {key: value for key, value in body.items() if key not in FIELDS_NOT_IN_KEY}


def key_prefix(namespace: str) -> str:
    """The Redis key prefix of one namespace's entries (used to flush just them)."""
    return f"{namespace}:resp:v{KEY_FORMAT_VERSION}:"


def cache_key(
    *, upstream_identity: str, path: str, body: Mapping[str, Any], namespace: str = "lab", requester: str | None = None
) -> str:
    """Return the Redis key for ``body`` sent to ``path`` on ``upstream_identity``.

    The key is ``"{namespace}:resp:v{version}:{sha256 hex}"``. Requests that differ only
    in key order, whitespace or ``1`` vs ``1.0`` get the same key; a different model,
    ``max_tokens``, upstream, path (query string included), namespace or ``requester``
    (see :func:`requester_fingerprint`) gets a different one. Raises
    :class:`UnkeyableBody` for a body that cannot be serialised canonically.
    """
    document = {
        "format": KEY_FORMAT_VERSION,
        "namespace": namespace,
        "upstream": upstream_identity,
        "path": path,
        "requester": requester,
        "request": answer_fields(body),
    }
    try:
        canonical = canonical_json(document).encode("utf-8")
    except UnicodeEncodeError as error:
        raise UnkeyableBody("the body holds a lone surrogate (an escaped \\ud800-\\udfff alone)") from error
    except (ValueError, TypeError, RecursionError) as error:
        raise UnkeyableBody(f"the body cannot be serialised canonically: {error}") from error
    return key_prefix(namespace) + hashlib.sha256(canonical).hexdigest()


def _reject_constant(name: str) -> Any:
    raise UnkeyableBody(f"the body holds {name}, which is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnkeyableBody(f"the number {text[:40]} overflows a double")
    return value


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        raise UnkeyableBody("the body repeats an object key (parsers disagree on which one counts)")
    return document


def _nesting_depth_at_most(value: Any, limit: int) -> bool:
    """True when ``value`` nests at most ``limit`` containers deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return False
        # Only containers go on the stack: a list of millions of numbers costs no tuples.
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return True


def parse_keyable_body(raw_body: bytes) -> dict[str, Any]:
    """Parse a request body that can be keyed, or raise :class:`UnkeyableBody` saying why.

    Keyable: a JSON object with no repeated keys, only finite numbers, and at most
    :data:`MAX_KEYABLE_NESTING_DEPTH` levels of nesting.
    """
    try:
        body = json.loads(
            raw_body,
            object_pairs_hook=_object_without_duplicates,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except UnkeyableBody:
        raise
    except RecursionError as error:
        raise UnkeyableBody("the body nests too deeply to parse") from error
    except (ValueError, UnicodeDecodeError) as error:
        raise UnkeyableBody(f"the body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise UnkeyableBody("the body is not a JSON object")
    if not _nesting_depth_at_most(body, MAX_KEYABLE_NESTING_DEPTH):
        raise UnkeyableBody(f"the body nests more than {MAX_KEYABLE_NESTING_DEPTH} levels deep")
    return body


# The request fields the cache policy reads (is_deterministic_request); a keyed request
# carries only these, so a large body's summary crosses a process boundary small.
POLICY_FIELDS: tuple[str, ...] = ("n", "seed", "temperature")


class KeyedRequest(NamedTuple):
    """What the proxy needs of a request body once keyed: the fields its policy reads
    (:data:`POLICY_FIELDS`; a field that is not a plain number, bool or null is kept as
    ``[]``, which no policy reads as deterministic), whether it asks for a stream, and its key."""

    policy_fields: dict[str, Any]
    streaming: bool
    key: str


def key_request(
    raw_body: bytes, *, upstream_identity: str, path: str, namespace: str, requester: str | None
) -> KeyedRequest:
    """Parse and key a request body (:func:`parse_keyable_body`, :func:`cache_key`); raise
    :class:`UnkeyableBody`. Pure and picklable, so large bodies can be keyed in another process."""
    body = parse_keyable_body(raw_body)
    key = cache_key(upstream_identity=upstream_identity, path=path, body=body, namespace=namespace, requester=requester)
    policy_fields = {
        name: (body[name] if body[name] is None or isinstance(body[name], (bool, int, float)) else [])
        for name in POLICY_FIELDS
        if name in body
    }
    return KeyedRequest(policy_fields, body.get("stream") is True, key)


# Header name -> is it a credential; header names come from clients, so it is bounded.
_CREDENTIAL_HEADER_MEMO: dict[bytes, bool] = {}
_CREDENTIAL_HEADER_MEMO_ENTRIES = 1024


def is_credential_header(name: bytes) -> bool:
    """True when a (lower-case) request header name carries a credential or an identity."""
    known = _CREDENTIAL_HEADER_MEMO.get(name)
    if known is not None:
        return known
    verdict = name in CREDENTIAL_HEADER_NAMES or any(part in name for part in CREDENTIAL_HEADER_NAME_PARTS)
    if len(_CREDENTIAL_HEADER_MEMO) < _CREDENTIAL_HEADER_MEMO_ENTRIES:
        _CREDENTIAL_HEADER_MEMO[name] = verdict
    return verdict


def requester_fingerprint(headers: Iterable[tuple[bytes, bytes]], query_string: bytes, *, secret: bytes) -> str | None:
    """Who is asking, as a keyed hash: HMAC-SHA256 (with the proxy's ``secret``) of every
    credential header (:func:`is_credential_header`) and of the query string (an
    ``?api-key=`` rides there). None when the request carries neither.

    The credential itself never leaves this function: the key and the single-flight group
    hold only the HMAC, which cannot be checked against guessed credentials without the
    secret.
    """
    # The hit path runs this for every request: a plain loop, the common case allocates nothing.
    credentials: list[tuple[bytes, bytes]] | None = None
    for name, value in headers:
        lowered = name.lower()
        if is_credential_header(lowered):
            if credentials is None:
                credentials = []
            credentials.append((lowered, value))
    if credentials is None and not query_string:
        return None
    credentials = sorted(credentials or ())
    message = hmac.new(secret, digestmod=hashlib.sha256)
    for name, value in credentials:
        message.update(b"%d:%s%d:%s" % (len(name), name, len(value), value))
    message.update(b"?%d:%s" % (len(query_string), query_string))
    return message.hexdigest()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_deterministic_request(body: Mapping[str, Any]) -> bool:
    """True when the request asks for a reproducible answer: a ``temperature`` of 0 or an
    integer ``seed``, and one choice (``n`` absent or 1).

    A missing (or null) temperature is *not* deterministic: vLLM falls back to the
    model's generation config and then to 1.0, the naive server to 1.0, so both sample.
    """
    n_choices = body.get("n")
    if n_choices is not None and not (_is_number(n_choices) and n_choices == 1):
        return False
    seed = body.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        return True
    temperature = body.get("temperature")
    return _is_number(temperature) and temperature == 0
