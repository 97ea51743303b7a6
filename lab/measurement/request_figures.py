"""Per-request figures of a run, stored compactly (SLO evaluation of stored runs: :mod:`lab.analysis.run_slo`).

``encode`` packs :class:`lab.measurement.k6_ndjson.RequestSamples` into the store's ``RunRequests``
columns (zlib-compressed float32, about 2-4 bytes a request); ``decode`` gives back the
:class:`RequestFigures` that :func:`lab.analysis.slo.evaluate` judges. Streamed runs carry
TTFT and TPOT per successful request; k6 writes no request id, so they are aligned with the
successes in the order k6 wrote them (exact percentiles per figure; the per-request join
for goodput is exact when every VU's points arrive in order, as k6 writes them).
"""

from __future__ import annotations

import math
import sys
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from db import store
from db.models import Run
from lab.measurement.k6_ndjson import RequestSamples


@dataclass
class RequestFigures:
    """Per-request figures of one run, in seconds (ttft/tpot empty when not streamed).

    Lists are aligned: index i is one request. ``ok`` is False for failed requests, whose
    figures are ignored.
    """

    latency_s: list[float] = field(default_factory=list)
    ok: list[bool] = field(default_factory=list)
    ttft_s: list[float | None] = field(default_factory=list)
    tpot_s: list[float | None] = field(default_factory=list)

    def values(self, figure: str) -> Sequence[float | None]:
        series: dict[str, Sequence[float | None]] = {
            "latency": self.latency_s,
            "ttft": self.ttft_s,
            "tpot": self.tpot_s,
        }
        return series[figure]

    def __len__(self) -> int:
        return len(self.ok)


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
