"""The naive baseline: Transformers ``generate`` behind FastAPI, one request at a time.

This is the seed experiment's hand-written server. It loads one causal LM with
``AutoModelForCausalLM`` in the app's lifespan and answers OpenAI completions, but it
runs a single ``generate`` at a time: requests wait on an ``asyncio.Lock`` (visible as
``vllm:num_requests_waiting``), which is exactly why its latency grows with load. The
generation itself runs in a worker thread so ``/health`` and ``/metrics`` stay responsive.

Endpoints: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (a prompt completed
as it is, no chat template; default ``max_tokens`` 16, as OpenAI's and vLLM's), each plain
JSON or server-sent events with usage, ``GET /v1/models``, ``GET /health`` and
``GET /metrics`` (Prometheus text, using vLLM's metric names where the meaning is the
same, so one scraper reads both servers).

Modules: ``engine`` (the model, the lock, a generation job), ``detokenizer``, ``metrics``,
``errors``, ``app`` (the FastAPI app, ``build_app``), ``cli``.

Run: ``python -m services.naive_server --model models/SmolLM2-135M-Instruct --port 8000``.
"""
