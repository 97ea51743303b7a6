"""The seed's experiment-2 cache proxy, rebuilt as described, for comparison only.

FastAPI + ``redis.asyncio`` + ``httpx``; key = SHA-256 of the raw request body; on a hit
return the stored response; on a miss forward upstream and store the answer if the
status is 200. No canonical key, no policy, no streaming, no fail-open: it is the
baseline the lab's proxy (``services/cache_proxy/``) is measured against.

Run: ``python -m benchmarks.seed_proxy --upstream URL --redis-url URL --port N``.
"""

from __future__ import annotations

import argparse
import hashlib

import httpx
import redis.asyncio as redis_asyncio
from fastapi import FastAPI, Request, Response


def build_app(*, upstream_url: str, redis_url: str) -> FastAPI:
    """The seed's proxy app: one redis client and one httpx client at module level."""
    app = FastAPI()
    redis_client = redis_asyncio.Redis.from_url(redis_url)
    http_client = httpx.AsyncClient(timeout=600)
    upstream = upstream_url.rstrip("/")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = await request.body()
        key = "seedcache:" + hashlib.sha256(body).hexdigest()
        cached = await redis_client.get(key)
        if cached:
            return Response(content=cached, media_type="application/json")
        upstream_response = await http_client.post(
            f"{upstream}/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        if upstream_response.status_code == 200:
            await redis_client.set(key, upstream_response.content)
        return Response(
            content=upstream_response.content, status_code=upstream_response.status_code, media_type="application/json"
        )

    return app


def main() -> None:
    """Serve the seed proxy with uvicorn on 127.0.0.1:--port."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m benchmarks.seed_proxy")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        build_app(upstream_url=args.upstream, redis_url=args.redis_url),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
