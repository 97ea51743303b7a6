"""k6 NDJSON files on disk (``--out json=FILE``, plain or ``.gz``), read in chunks of whole
lines through a :class:`~lab.measurement.k6_ndjson.SampleStream`, never whole.

Runs read k6's samples from its pipe; files are what a run keeps (``keep_raw``), what
older runs left and what the tests feed.
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from lab.measurement.k6_ndjson import PerSecondSeries, RequestSamples, SampleStream, count_error_answers
from lab.measurement.k6_results import K6ResultsError

CHUNK_BYTES = 8 * 1024 * 1024


def iter_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """Yield chunks of whole lines (the last line may lack its newline); ``.gz`` files decompressed."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        remainder = b""
        while True:
            block = handle.read(chunk_bytes)
            if not block:
                break
            if remainder:
                block = remainder + block
            cut = block.rfind(b"\n")
            if cut < 0:
                remainder = block
                continue
            remainder = block[cut + 1 :]
            yield block[: cut + 1]
        if remainder:
            yield remainder


def stream_file(path: Path | str, *, bucket_s: float = 1.0) -> tuple[PerSecondSeries, RequestSamples]:
    """A k6 NDJSON file (plain or ``.gz``) read in chunks through a :class:`SampleStream`."""
    path = Path(path)
    if not path.exists():
        raise K6ResultsError(f"k6 NDJSON {path} does not exist")
    stream = SampleStream(bucket_s=bucket_s)
    for chunk in iter_chunks(path):
        stream.feed(chunk)
    return stream.finish()


def stream_series(path: Path | str, *, bucket_s: float = 1.0) -> PerSecondSeries:
    """Stream a k6 NDJSON file (``--out json=FILE``) into per-bucket series.

    Only workload requests (tagged ``lab_request:chat``) count; successes are k6's
    ``expected_response:true``.
    """
    return stream_file(path, bucket_s=bucket_s)[0]


def stream_request_samples(path: Path | str) -> RequestSamples:
    """Every workload request's latency, success and (streamed runs) TTFT/TPOT from a k6 NDJSON file."""
    return stream_file(path)[1]


def error_answers(path: Path | str) -> Counter[str]:
    """How many failed workload requests got each error answer, from a k6 NDJSON (lines
    without the tag, written by a k6 script of before the tag, count nothing)."""
    counts: Counter[str] = Counter()
    path = Path(path)
    if not path.is_file():
        return counts
    for chunk in iter_chunks(path):
        count_error_answers(chunk, counts)
    return counts
