"""``python -m lab services up|down|status``: the managed services of this machine."""

from __future__ import annotations

import argparse
import json
import sys

from lab.context import LabContext
from services.catalog import ServiceKind

# The services `services up` starts: every backend the lab manages, then the cache's two.
CACHE_SERVICE_NAMES = (ServiceKind.REDIS, ServiceKind.CACHE_PROXY)


def service_names() -> list[str]:
    from lab.backends import managed_backend_names

    return [*managed_backend_names(), *CACHE_SERVICE_NAMES]


def services_up(names: list[str], context: LabContext) -> dict[str, str]:
    """Start the named services with the default model and each backend's default options.

    Without names: every backend the lab manages. The cache proxy goes in front of the
    backend named before it (the spec's default backend if none)."""
    from lab.backends import default_service_config, managed_backend_names
    from lab.specs.schema import RunSpec
    from services.catalog import cache_proxy_config, redis_config

    settings, manager = context.settings, context.service_manager()
    urls: dict[str, str] = {}

    def backend_up(name: str) -> str:
        return manager.ensure(name, default_service_config(name, model=settings.default_model, settings=settings))

    upstream: str | None = None
    for name in names or managed_backend_names():
        if name == ServiceKind.REDIS:
            urls[name] = manager.ensure(ServiceKind.REDIS, redis_config())
        elif name == ServiceKind.CACHE_PROXY:
            upstream = upstream or backend_up(RunSpec.model_fields["backend"].default)
            redis_url = urls.get(ServiceKind.REDIS) or manager.ensure(ServiceKind.REDIS, redis_config())
            urls[name] = manager.ensure(
                ServiceKind.CACHE_PROXY, cache_proxy_config(upstream_url=upstream, redis_url=redis_url)
            )
        elif name in managed_backend_names():
            urls[name] = upstream = backend_up(name)
        else:
            raise SystemExit(f"unknown service {name!r}; services: {', '.join(service_names())}")
    return urls


def cmd_services(args: argparse.Namespace, context: LabContext) -> int:
    from services.supervisor import ServiceStartError

    unknown = [name for name in getattr(args, "names", []) if name not in service_names()]
    if unknown:
        print(f"error: unknown service {', '.join(unknown)}; services: {', '.join(service_names())}", file=sys.stderr)
        return 2
    manager = context.service_manager()
    if args.action == "up":
        try:
            urls = services_up(args.names, context)
        except ServiceStartError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        except ValueError as error:  # a rejected or missing model
            print(f"error: {error}", file=sys.stderr)
            return 2
        for name, url in urls.items():
            print(f"{name}: {url}")
        return 0
    if args.action == "down":
        stopped = manager.stop_all(args.names or None)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    statuses = [status.to_dict() for status in manager.status()]
    if args.json:
        print(json.dumps(statuses, indent=2))
    else:
        for status in statuses:
            print(f"{status['name']:<12} {status['state']:<10} {status['url'] or '-':<28} pid={status['pid'] or '-'}")
        if not statuses:
            print("no services recorded: python -m lab services up naive vllm")
    return 0
