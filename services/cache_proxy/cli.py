"""``python -m services.cache_proxy``: the standalone proxy's command line, served by uvicorn
or granian (:mod:`~services.cache_proxy.serving`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable

import services.cache_proxy
from services.cache_proxy.app import CacheProxy
from services.cache_proxy.bodies import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES
from services.cache_proxy.config import ProxyConfig
from services.cache_proxy.policy import CREDENTIAL_MODES, CREDENTIAL_MODES_HELP, POLICIES
from services.cache_proxy.semantic_cli import CACHE_TIERS, add_semantic_arguments, checked_semantic_settings
from services.cache_proxy.serving import (
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_SERVER,
    SERVERS,
    SETTINGS_ENVIRONMENT_VARIABLE,
    log_warnings_to_stderr,
    serve_granian,
    serve_uvicorn,
    settings_to_environment,
)
from services.traces.blocks import MOONCAKE_BLOCK_TOKENS
from services.traces.recorder import RecordingError, check_recording


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    """Command-line arguments of the standalone proxy."""
    parser = argparse.ArgumentParser(
        prog="python -m services.cache_proxy",
        description=(services.cache_proxy.__doc__ or "").split("\n")[0],
        epilog="Credentials: " + CREDENTIAL_MODES_HELP,
    )
    parser.add_argument("--upstream", required=True, help="base URL of an OpenAI-compatible server")
    parser.add_argument("--redis-url", default=None, help="redis://host:port/db (needed unless --cache off)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    _add_cache_arguments(parser)
    add_semantic_arguments(parser)
    _add_recording_arguments(parser)
    _add_server_arguments(parser)
    return parser.parse_args(list(argv) if argv is not None else None)


def _add_recording_arguments(parser: argparse.ArgumentParser) -> None:
    """The trace the proxy records of what it sees (services.traces)."""
    parser.add_argument(
        "--cache",
        choices=CACHE_TIERS,
        default="exact",
        help="exact (or on): answers of identical requests; semantic: also of paraphrases (--similarity); "
        "off: pass every request upstream, uncached (to record only; no Redis needed)",
    )
    parser.add_argument(
        "--record-trace",
        metavar="FILE",
        default=None,
        help="write the requests seen as a Mooncake trace (JSONL): arrival in ms, prompt and answer lengths, "
        "chained hash ids of the prompt's token blocks, session id; no text unless --record-text",
    )
    parser.add_argument("--record-text", action="store_true", help="also write each prompt's text")
    parser.add_argument(
        "--record-rotate-mb",
        type=float,
        default=None,
        help="start the next file (FILE.1, FILE.2 ...) when one reaches this size",
    )
    parser.add_argument(
        "--record-block-tokens",
        type=int,
        default=MOONCAKE_BLOCK_TOKENS,
        help="prompt tokens one hash id stands for (the trace workload's block_tokens)",
    )
    parser.add_argument(
        "--record-tokenizer",
        metavar="DIR",
        default=None,
        help="the served model's tokenizer folder: exact lengths and blocks (default: four bytes of text a token)",
    )


def checked_settings(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, in one line (None: nothing). Creates the recording's
    (empty) file when it can be written."""
    if args.cache != "off" and not args.redis_url:
        return "--redis-url is required unless --cache off"
    semantic_refusal = checked_semantic_settings(args)
    if semantic_refusal is not None:
        return semantic_refusal
    if args.record_trace is None:
        given = [name for name in ("record_text", "record_rotate_mb", "record_tokenizer") if getattr(args, name)]
        if given:
            return f"--{given[0].replace('_', '-')} needs --record-trace FILE"
        return None
    try:
        check_recording(
            args.record_trace,
            rotate_mb=args.record_rotate_mb,
            block_tokens=args.record_block_tokens,
            tokenizer=args.record_tokenizer,
        )
    except RecordingError as error:
        return str(error)
    return None


def _add_cache_arguments(parser: argparse.ArgumentParser) -> None:
    """What is cached and for whom, how long Redis and the upstream may take, the in-process tier."""
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default="all",
        help="all: cache every successful answer; deterministic: only requests with temperature 0 or an integer "
        "seed, and n 1 (a missing temperature means 1.0, sampled, on vLLM and the naive server: not cached)",
    )
    parser.add_argument(
        "--credentials",
        choices=CREDENTIAL_MODES,
        default="bypass",
        help="requests carrying credentials: bypass the cache (default) or cache per credential",
    )
    parser.add_argument(
        "--credential-secret-file",
        type=argparse.FileType("rb"),
        default=None,
        help="file holding the HMAC secret of per-credential keys (default: random per start; proxies sharing "
        "one Redis share per-credential entries only with the same secret)",
    )
    parser.add_argument("--ttl-s", type=int, default=None)
    parser.add_argument("--namespace", default="lab")
    parser.add_argument("--no-single-flight", action="store_true")
    parser.add_argument("--redis-timeout-s", type=float, default=0.05)
    parser.add_argument("--upstream-timeout-s", type=float, default=600.0)
    parser.add_argument("--upstream-identity", default=None, help="key identity of the upstream (default: its URL)")
    parser.add_argument(
        "--local-tier-entries",
        type=int,
        default=4096,
        help="entries of the in-process tier kept coherent by Redis invalidations (0: off)",
    )
    parser.add_argument(
        "--local-tier-max-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="bytes of stored answers the in-process tier may hold",
    )


def _add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """The HTTP server and the limits it puts on a request's size and arrival time."""
    parser.add_argument("--server", choices=SERVERS, default=DEFAULT_SERVER, help="the HTTP server")
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help="larger request bodies get 413 (checked on Content-Length before reading)",
    )
    parser.add_argument(
        "--header-timeout-s",
        type=float,
        default=DEFAULT_HEADER_TIMEOUT_S,
        help="a request's headers must arrive within this, or the connection is closed",
    )
    parser.add_argument(
        "--body-timeout-s",
        type=float,
        default=DEFAULT_BODY_TIMEOUT_S,
        help="a request's whole body must arrive within this, or 408",
    )


def _config(args: argparse.Namespace) -> ProxyConfig:
    return ProxyConfig(
        upstream_url=args.upstream,
        redis_url=args.redis_url or "",
        policy=args.policy,
        credentials=args.credentials,
        credential_secret=args.credential_secret_file.read().strip() if args.credential_secret_file else None,
        ttl_s=args.ttl_s,
        namespace=args.namespace,
        single_flight=not args.no_single_flight,
        redis_timeout_s=args.redis_timeout_s,
        upstream_timeout_s=args.upstream_timeout_s,
        upstream_identity=args.upstream_identity,
        local_tier_entries=args.local_tier_entries,
        local_tier_max_bytes=args.local_tier_max_bytes,
        max_body_bytes=args.max_body_bytes,
        body_timeout_s=args.body_timeout_s,
        cache=args.cache != "off",
        semantic_similarity=args.similarity if args.cache == "semantic" else None,
        semantic_embed=args.embed,
        semantic_model=args.embedding_model,
        semantic_verify_fraction=args.semantic_verify_fraction,
        record_trace=args.record_trace,
        record_text=args.record_text,
        record_rotate_mb=args.record_rotate_mb,
        record_block_tokens=args.record_block_tokens,
        record_tokenizer=args.record_tokenizer,
    )


def main(argv: Iterable[str] | None = None) -> None:
    """Serve the proxy with ``--server`` on ``--host:--port``."""
    args = parse_args(argv)
    refused = checked_settings(args)
    if refused is not None:
        print(f"python -m services.cache_proxy: {refused}", file=sys.stderr)
        raise SystemExit(2)
    log_warnings_to_stderr()
    app = CacheProxy(_config(args))
    if args.server == "uvicorn":
        serve_uvicorn(app, host=args.host, port=args.port, header_timeout_s=args.header_timeout_s)
        return
    # granian builds the app in its worker process, from these settings.
    os.environ[SETTINGS_ENVIRONMENT_VARIABLE] = settings_to_environment(app.config)
    interface, factory = (
        ("rsgi", "rsgi_app_from_environment") if args.server == "granian-rsgi" else ("asgi", "app_from_environment")
    )
    serve_granian(
        f"services.cache_proxy.serving:{factory}",
        host=args.host,
        port=args.port,
        factory=True,
        header_timeout_s=args.header_timeout_s,
        interface=interface,
    )
