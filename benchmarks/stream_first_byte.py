"""When does a streamed chat answer's first byte leave the server: with its headers, or
with its first token? Times one streamed request per prompt with httpx.

    .venv/bin/python -m benchmarks.stream_first_byte --url http://127.0.0.1:8000 [--requests 5]

Prints, per request and as medians: time to the response headers, to the first body
bytes, to the first chunk that carries content, and to the end (seconds). A client's
time to first byte (k6's http_req_waiting) is time to headers; it is time to first token
only when the headers leave with the first chunk.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx


def time_one(url: str, model: str, prompt: str, max_tokens: int) -> tuple[dict[str, float], str]:
    """The times (seconds from the request) of one streamed answer's headers, first bytes, first
    content and end, and its X-Cache header."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    times: dict[str, float] = {}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as response:
        times["headers_s"] = time.perf_counter() - started
        x_cache = str(response.headers.get("x-cache", "-"))
        for line in response.iter_lines():
            now = time.perf_counter() - started
            times.setdefault("first_bytes_s", now)
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                event = json.loads(line[5:])
                choices = event.get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    times.setdefault("first_content_s", now)
        times["end_s"] = time.perf_counter() - started
    return times, x_cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--same-prompt", action="store_true", help="repeat one prompt (cache hits)")
    args = parser.parse_args()
    url = args.url.rstrip("/")
    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    rows = []
    for index in range(args.requests):
        number = 7 if args.same_prompt else 1000 + index
        row, x_cache = time_one(url, model, f"Write a short story about the number {number}.", args.max_tokens)
        rows.append(row)
        print(json.dumps({"x_cache": x_cache, **{key: round(value, 4) for key, value in row.items()}}))
    medians = {
        key: round(statistics.median(row[key] for row in rows), 4)
        for key in ("headers_s", "first_bytes_s", "first_content_s", "end_s")
    }
    print("median", json.dumps(medians))


if __name__ == "__main__":
    main()
