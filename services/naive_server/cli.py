"""``python -m services.naive_server``: the naive server's command line, served by uvicorn."""

from __future__ import annotations

import argparse
import logging

import prometheus_client
import torch

import services.naive_server
from services.naive_server.app import build_app
from services.naive_server.engine import TORCH_DTYPES


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of ``python -m services.naive_server``."""
    parser = argparse.ArgumentParser(
        prog="python -m services.naive_server", description=(services.naive_server.__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--model", required=True, help="Hugging Face model folder (or hub id available offline)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", choices=sorted(TORCH_DTYPES), default="bfloat16")
    parser.add_argument("--served-model-name", default=None, help="name clients use (default: --model)")
    parser.add_argument("--max-body-bytes", type=int, default=1_000_000)
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)"
    )
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Serve the app with uvicorn until interrupted."""
    import uvicorn

    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # vLLM exposes no *_created series either; keeps the scrape small and comparable.
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # the library leaves it unannotated
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    app = build_app(
        model_path=args.model,
        dtype=args.dtype,
        max_body_bytes=args.max_body_bytes,
        served_model_name=args.served_model_name,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
