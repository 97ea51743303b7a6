"""The catalog of managed services: for each kind, the argv, environment and probe.

A service is described by a :class:`ServiceConfig` (a kind and its parameters). This is
the one place where a kind is turned into a :class:`ManagedService`. Inference servers
are ``command`` services: the caller (the lab's backend registry, ``lab/backends``)
gives their argv, environment and readiness; this package knows no backend.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict

from services.cache_proxy.serving import DEFAULT_SERVER as DEFAULT_PROXY_SERVER
from services.cache_proxy.serving import SERVERS as PROXY_SERVERS
from services.processes import PROJECT_ROOT
from services.redis_server import redis_ping_probe, redis_server_argv
from services.supervisor import ManagedService


class ServiceKind(StrEnum):
    """What the catalog starts. ``command``: any server the caller describes (the lab's
    inference backends). Redis and the cache proxy are the services this package itself
    provides; each runs under its kind's name (one of each per worker), so these values are
    also the lab's own service names."""

    COMMAND = "command"
    REDIS = "redis"
    CACHE_PROXY = "cache-proxy"


SERVICE_KINDS = tuple(ServiceKind)

# The lab's own services, in the order they are stopped: dependants first (the proxy uses
# Redis). Every other service (the backends) is stopped after them.
STOP_ORDER = (ServiceKind.CACHE_PROXY, ServiceKind.REDIS)


def stop_rank(name: str) -> int:
    """Where the service ``name`` (or kind) comes in :data:`STOP_ORDER`; the backends last."""
    return STOP_ORDER.index(ServiceKind(name)) if name in STOP_ORDER else len(STOP_ORDER)


@dataclass(frozen=True)
class ServiceConfig:
    """What to start: ``kind`` plus parameters; equal configs can share one process."""

    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in SERVICE_KINDS:
            raise ValueError(f"unknown service kind {self.kind!r}; kinds: {', '.join(SERVICE_KINDS)}")

    @property
    def config_hash(self) -> str:
        """A stable hash of kind and params (to decide whether a running one can be reused)."""
        canonical = json.dumps({"kind": self.kind, "params": self.params}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": self.params}


def command_config(
    *,
    backend: str,
    argv: list[str],
    env: dict[str, str] | None = None,
    health_path: str = "/health",
    readiness_timeout_s: float = 180.0,
) -> ServiceConfig:
    """A server started from ``argv`` (``{host}`` and ``{port}`` are filled in) that is ready
    once ``GET health_path`` answers 200. ``backend`` names what it serves (for people)."""
    return ServiceConfig(
        ServiceKind.COMMAND,
        {
            "backend": backend,
            "argv": list(argv),
            "env": dict(env or {}),
            "health_path": health_path,
            "readiness_timeout_s": readiness_timeout_s,
        },
    )


def redis_config(*, maxmemory: str = "256mb") -> ServiceConfig:
    return ServiceConfig(ServiceKind.REDIS, {"maxmemory": maxmemory})


def cache_proxy_config(
    *,
    upstream_url: str,
    redis_url: str,
    policy: str = "all",
    ttl_s: int | None = None,
    single_flight: bool = True,
    server: str = DEFAULT_PROXY_SERVER,
    record_trace: str | None = None,
    record_tokenizer: str | None = None,
    record_block_tokens: int | None = None,
    tier: str = "exact",
    similarity: float | None = None,
    embed: str | None = None,
    embedding_model: str | None = None,
    verify_fraction: float | None = None,
) -> ServiceConfig:
    """The response cache in front of ``upstream_url``; ``server``: the HTTP server it runs
    under (``services.cache_proxy.serving.SERVERS``); ``record_*``: the trace it records
    (``--record-trace``; a file per run, so a recording proxy is started for its run); ``tier``: exact,
    semantic (with ``similarity``, ``embed``, ``embedding_model``, ``verify_fraction``) or off."""
    if server not in PROXY_SERVERS:
        raise ValueError(f"the cache proxy's server must be one of {', '.join(PROXY_SERVERS)}, not {server!r}")
    return ServiceConfig(
        ServiceKind.CACHE_PROXY,
        {
            "upstream_url": upstream_url,
            "redis_url": redis_url,
            "policy": policy,
            "ttl_s": ttl_s,
            "single_flight": single_flight,
            "server": server,
            "record_trace": record_trace,
            "record_tokenizer": record_tokenizer,
            "record_block_tokens": record_block_tokens,
            "tier": tier,
            "similarity": similarity,
            "embed": embed,
            "embedding_model": embedding_model,
            "verify_fraction": verify_fraction,
        },
    )


def _tier_arguments(params: dict[str, Any]) -> list[str]:
    """The proxy's ``--cache`` tier and, for the semantic one, its settings."""
    tier = params.get("tier") or "exact"
    arguments = ["--cache", tier]
    if tier == "semantic":
        for option, name in (
            ("--similarity", "similarity"),
            ("--embed", "embed"),
            ("--embedding-model", "embedding_model"),
            ("--semantic-verify-fraction", "verify_fraction"),
        ):
            if params.get(name) is not None:
                arguments += [option, str(params[name])]
    return arguments


class _CommonParts(TypedDict):
    """What every kind's :class:`ManagedService` is given alike."""

    name: str
    log_path: Path
    port: int | None
    cwd: Path


def build_service(name: str, config: ServiceConfig, *, log_path: Path, port: int | None = None) -> ManagedService:
    """The (not yet started) :class:`ManagedService` for ``config``."""
    params = config.params
    python = sys.executable
    common: _CommonParts = {"name": name, "log_path": log_path, "port": port, "cwd": PROJECT_ROOT}
    if config.kind == ServiceKind.COMMAND:
        return ManagedService(
            argv=list(params["argv"]),
            env=dict(params["env"]),
            health_path=params["health_path"],
            readiness_timeout_s=float(params["readiness_timeout_s"]),
            **common,
        )
    if config.kind == ServiceKind.REDIS:
        return ManagedService(
            argv=redis_server_argv(maxmemory=params["maxmemory"]),
            readiness_probe=redis_ping_probe,
            readiness_timeout_s=15.0,
            **common,
        )
    if config.kind == ServiceKind.CACHE_PROXY:
        argv = [
            python,
            "-m",
            "services.cache_proxy",
            "--upstream",
            params["upstream_url"],
            "--redis-url",
            params["redis_url"],
            "--policy",
            params["policy"],
            "--host",
            "{host}",
            "--port",
            "{port}",
        ]
        if params.get("ttl_s"):
            argv += ["--ttl-s", str(params["ttl_s"])]
        if not params.get("single_flight", True):
            argv.append("--no-single-flight")
        argv += ["--server", params.get("server", DEFAULT_PROXY_SERVER)]
        argv += _tier_arguments(params)
        if params.get("record_trace"):
            argv += ["--record-trace", params["record_trace"]]
            if params.get("record_tokenizer"):
                argv += ["--record-tokenizer", params["record_tokenizer"]]
            if params.get("record_block_tokens"):
                argv += ["--record-block-tokens", str(params["record_block_tokens"])]
        # The semantic tier loads its embedding model (and torch) before it answers.
        readiness_timeout_s = 90.0 if params.get("tier") == "semantic" else 30.0
        return ManagedService(argv=argv, readiness_timeout_s=readiness_timeout_s, **common)
    raise ValueError(f"unknown service kind {config.kind!r}")
