"""Redis response cache in front of any OpenAI-compatible upstream.

The seed's experiment 2 put a FastAPI proxy keyed on ``sha256(raw body)`` in front of
vLLM. This is that proxy made correct and fast:

- **Key**: :func:`services.cache_proxy.keys.cache_key` (canonical JSON of upstream, path and every
  answer-changing field), so key-order and whitespace variants share an entry and
  different models or upstreams never do.
- **Policy**: ``all`` caches every successful answer (the seed's behaviour, used by the
  seed-reproduction presets); ``deterministic`` only temperature-0 or seeded, ``n == 1``
  requests (a missing temperature is 1.0 on vLLM and the naive server: not cached). Per
  request ``Cache-Control: no-cache`` refreshes, ``no-store`` bypasses (every
  ``Cache-Control`` line is read). Every proxied response carries
  ``X-Cache: HIT|SEMANTIC|MISS|BYPASS|ERROR``.
- **Credentials** (``--credentials``): a request carrying credentials (Authorization,
  cookies, api-key headers, a query string;
  :func:`services.cache_proxy.keys.is_credential_header`) bypasses the cache by default, or
  is cached per credential: an HMAC of its credentials with a per-proxy secret joins the
  key and so the single-flight group. One credential's answer is never served to another
  (RFC 9111, section 3.5).
- **Never cached**: non-2xx answers, answers without choices, streams cut off by the
  client or the upstream, answers the upstream marked ``Cache-Control: no-store`` or
  ``private`` or that set a cookie, and bodies that cannot be keyed
  (not a JSON object, NaN, overflowing numbers, lone surrogates, repeated keys, deep
  nesting: passed through as BYPASS). A ``length`` finish is complete and cached.
- **Streaming**: a miss is passed through as it arrives and stored (raw SSE bytes) only
  once ``data: [DONE]`` arrived, and before that last chunk is sent on: a client that has
  the whole answer finds it in the cache, however soon it closes (the OpenAI SDK closes at
  ``[DONE]``); a hit replays those bytes as ``text/event-stream``.
- **Single-flight** (switchable): concurrent identical misses make one upstream call; only
  a successful, storable answer is shared, followers of a failed leader ask the upstream.
- **Fail-open**: Redis calls have a short timeout and no retries; a circuit breaker
  stops asking a failing Redis for a few seconds, then lets one trial through. Meanwhile
  requests go straight upstream with ``X-Cache: ERROR``; the cache never causes a 5xx.
- **Hostile clients** (:mod:`~services.cache_proxy.flights`, :mod:`~services.cache_proxy.bodies`):
  every upstream call runs in its own task and is cancelled when the last client waiting
  for it leaves (a single-flight call goes on while a follower still waits), so the
  upstream sees the client leave as if called directly; bodies over ``--max-body-bytes``
  get 413 (on ``Content-Length`` before reading, else counted as they arrive), bodies
  slower than ``--body-timeout-s`` 408, headers slower than ``--header-timeout-s`` a closed
  connection; bodies of 64 KiB and more are keyed in a worker process, so the loop keeps
  serving hits; a stored value is checked on read (its tag, its shape, the stream flag
  against the request's) and a bad one, or a key of another Redis type (WRONGTYPE, not an
  outage for the breaker), is a miss whose answer replaces it.
- **Server** (``--server``, :mod:`~services.cache_proxy.serving`): uvicorn (httptools,
  uvloop, a header deadline added; the default, fastest with k6 beside it on 2 cores), granian
  (Rust, hyper) through ASGI, or granian through its own RSGI interface
  (:mod:`~services.cache_proxy.rsgi`, the same app behind an adapter; fastest when the load
  client has cores of its own).
- ``GET /metrics`` (own prometheus registry), ``GET /health`` (upstream and Redis
  reachability), ``POST /cache/flush`` (SCAN + UNLINK of this namespace only); every other
  path is passed through uncached.

- **Semantic tier** (``--cache semantic --similarity T``, :mod:`~services.cache_proxy.semantic`): after
  an exact miss, the request's last user turn (or whole conversation, ``--embed``) is embedded
  (:mod:`services.embeddings`, all-MiniLM-L6-v2) and the nearest stored prompt among entries whose
  other fields match exactly (model, sampling, max tokens, tools, upstream, namespace, credential)
  answers it at a cosine similarity of at least T: ``X-Cache: SEMANTIC`` and
  ``X-Cache-Similarity``. Vectors are stored in Redis beside their entries with the same TTL and
  indexed in process, rebuilt at start; ``--semantic-verify-fraction`` also asks the upstream for
  a share of semantic hits and counts the false ones.

- **Local tier** (:class:`~services.cache_proxy.local_tier.LocalTier`, on by default,
  bounded in entries and bytes): hits are answered from process memory, kept coherent by
  Redis's client tracking (an entry is dropped when Redis says its key was overwritten,
  deleted, expired, evicted or flushed) and by the TTL read with each value. Off while
  that is not guaranteed.

Speed: it is a raw ASGI app (no framework routing or middleware) and talks to Redis over
one shared, pipelined RESP connection (:class:`~services.cache_proxy.resp.PipelinedRedis`):
on a hit the request body is parsed once, hashed once, one ``GET`` is written and the stored bytes are sent as they
came from Redis. A pipelined connection needs no pool checkout per call and lets Redis
answer many concurrent GETs per read; a timed-out call leaves its reply slot in the queue,
so replies stay matched in order. Repeated request bodies are memoised (bounded) by their
bytes, so a repeated hit neither parses nor hashes again. One shared
``httpx.AsyncClient`` serves all upstream calls.
Both are opened in the ASGI lifespan (or lazily on the first request when the host skips
the lifespan, as ``httpx.ASGITransport`` does).

Standalone::

    python -m services.cache_proxy --upstream URL --redis-url URL --port N \\
        [--policy all|deterministic] [--credentials bypass|per-credential] [--ttl-s N] \\
        [--no-single-flight] [--namespace NAME] [--server uvicorn|granian|granian-rsgi] [--max-body-bytes N]
        [--header-timeout-s S] [--body-timeout-s S] [--cache exact|semantic|off]
        [--similarity T] [--embed last_user_turn|conversation] [--embedding-model NAME]
        [--semantic-verify-fraction F]
        [--record-trace FILE [--record-text] [--record-rotate-mb MB] [--record-block-tokens N] [--record-tokenizer DIR]]

- **Trace recording** (``--record-trace``, :mod:`~services.cache_proxy.recording`,
  :mod:`services.traces`): every request on a cacheable path, hit or not, is written as a
  Mooncake trace line by a writer thread; ``--cache off`` passes everything upstream and only records.

Modules: ``policy`` (what is looked up, stored, bypassed), ``keys`` (the canonical key),
``resp`` (the pipelined Redis client), ``local_tier``, ``circuit_breaker``, ``metrics``,
``responses`` (ASGI plumbing, the stored value's layout and check), ``semantic``, ``semantic_keys``,
``semantic_index`` and ``semantic_cli`` (the semantic tier), ``admin`` (the admin endpoints), ``bodies``
(body limit, deadline, off-loop keying), ``flights`` (upstream calls and single-flight), ``upstream``
(the forwarded request, the stream relay), ``app`` (:class:`~services.cache_proxy.app.CacheProxy`,
``build_app``), ``serving`` (uvicorn, granian), ``rsgi`` (the RSGI adapter), ``cli`` (``parse_args``, ``main``).
"""
