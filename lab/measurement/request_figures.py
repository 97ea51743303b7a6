"""Per-request figures of a run, stored compactly, and SLO evaluation of stored runs.

``encode`` packs :class:`lab.measurement.k6_ndjson.RequestSamples` into the store's ``RunRequests``
columns (zlib-compressed float32, about 2-4 bytes a request); ``decode`` gives back the
:class:`lab.analysis.slo.RequestFigures` that :func:`lab.analysis.slo.evaluate` judges. Streamed runs carry
TTFT and TPOT per successful request; k6 writes no request id, so they are aligned with the
successes in the order k6 wrote them (exact percentiles per figure; the per-request join
for goodput is exact when every VU's points arrive in order, as k6 writes them).
"""

from __future__ import annotations

import math
import sys
import zlib
from array import array
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store
from db.models import Run
from lab.analysis.slo import RequestFigures, Slo, SloEvaluation, evaluate
from lab.measurement.k6_ndjson import RequestSamples
from lab.measurement.results import SloFigures

ENCODING = "zlib-float32-le-v1"


class RequestFiguresMissing(LookupError):
    """A run has no stored per-request figures (made before they were kept, or no k6 output)."""


def _pack(values: array[float]) -> bytes:
    if sys.byteorder != "little":
        values = array("f", values)
        values.byteswap()
    return zlib.compress(values.tobytes(), 6)


def _unpack(blob: bytes | None) -> array[float]:
    values = array("f")
    if blob:
        values.frombytes(zlib.decompress(blob))
        if sys.byteorder != "little":
            values.byteswap()
    return values


def encode(samples: RequestSamples) -> dict[str, Any]:
    """The ``RunRequests`` columns for ``samples`` (TTFT/TPOT None when the run was not streamed)."""
    return {
        "requests": len(samples),
        "encoding": ENCODING,
        "latency_s": _pack(samples.latency_s),
        "ok": zlib.compress(bytes(samples.ok), 6),
        "ttft_s": _pack(samples.ttft_s) if len(samples.ttft_s) else None,
        "tpot_s": _pack(samples.tpot_s) if len(samples.tpot_s) else None,
    }


def _aligned(per_success: array[float], ok: list[bool]) -> list[float | None]:
    """Per-success values spread over all requests (None for failures and missing ones)."""
    values: list[float | None] = []
    position = 0
    for request_ok in ok:
        if request_ok and position < len(per_success):
            value = float(per_success[position])
            values.append(None if math.isnan(value) else value)
            position += 1
        else:
            values.append(None)
    return values


def decode(*, latency_s: bytes, ok: bytes, ttft_s: bytes | None, tpot_s: bytes | None, **_: Any) -> RequestFigures:
    """:class:`RequestFigures` from the stored columns."""
    flags = [bool(flag) for flag in zlib.decompress(ok)]
    ttft, tpot = _unpack(ttft_s), _unpack(tpot_s)
    return RequestFigures(
        latency_s=[float(value) for value in _unpack(latency_s)],
        ok=flags,
        ttft_s=_aligned(ttft, flags) if len(ttft) else [],
        tpot_s=_aligned(tpot, flags) if len(tpot) else [],
    )


def load_request_figures(*, session: Session, run_id: int) -> RequestFigures:
    row = store.get_run_requests(session=session, run_id=run_id)
    if row is None:
        raise RequestFiguresMissing(
            f"run {run_id} has no per-request figures (it ran before they were stored, or k6 wrote no output)"
        )
    return decode(latency_s=row.latency_s, ok=row.ok, ttft_s=row.ttft_s, tpot_s=row.tpot_s)


def run_duration_s(run: Run) -> float | None:
    """The seconds of load goodput is counted over: what k6 measured, else the planned time."""
    return run.measured_duration_s or run.duration_s or None


def evaluate_run(*, session: Session, run_id: int, slo: Slo) -> SloEvaluation:
    """Evaluate a stored run against ``slo`` from its per-request figures."""
    run = store.get_run(session=session, run_id=run_id)
    if run is None:
        raise LookupError(f"no run with id {run_id}")
    return evaluate(slo, load_request_figures(session=session, run_id=run_id), duration_s=run_duration_s(run))


def save_evaluation(*, engine: Engine, run_id: int, evaluation: SloEvaluation) -> None:
    """Write goodput, attainment and the SLO they are against onto the run."""
    figures = SloFigures(
        goodput_req_per_s=evaluation.goodput_req_per_s,
        slo_attainment=evaluation.attainment,
        slo_evaluated=str(evaluation.slo),
    )
    store.update_run(engine=engine, run_id=run_id, **figures.figures())
