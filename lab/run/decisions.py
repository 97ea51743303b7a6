"""A run's decisions, as plain functions: what a failure's reason is, when the load must
stop, what to warn about, which partial figures to keep and which final state a run ends in.

The executor (``runner.py``) and its steps (``steps.py``) do the I/O and ask these;
``tests/unit/lab/run/test_run_decisions.py`` checks them without processes, services or k6.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError

from db.models import RunStatus
from lab.measurement.checks import join_warnings
from lab.measurement.k6_results import K6ResultsError
from lab.measurement.results import RunResults
from services.catalog import ServiceKind

# Services a run survives losing: the cache proxy fails open without Redis (answers come
# from the backend, store errors are counted), so the run goes on and says so.
FAIL_OPEN_SERVICES = (ServiceKind.REDIS,)
# errno values that mean "the data could not be written": disk full, quota, read-only, I/O.
WRITE_FAILURE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM, errno.EFBIG}
)
# Less free space than this where the run folder lives: k6's outputs were likely cut short.
RUN_FOLDER_MIN_FREE_BYTES = 1024 * 1024
# k6's exit codes after which its figures are valid (99: thresholds crossed).
K6_EXIT_CODES_WITH_FIGURES = (0, 99)
# The longest reason stored with a failed run (its end, where the cause usually is).
MAX_REASON_CHARS = 4000
# The final write tried with the figures this many times; after that without them.
FINAL_WRITE_TRIES_WITH_FIGURES = 3
# The columns of a final state without its figures (the small write tried last).
BARE_FINAL_COLUMNS = ("status", "progress", "finished_at", "reason")
# What a database error says when the database cannot be reached now (PostgreSQL stopped or
# restarting, a lost connection, SQLite locked beyond its busy timeout), in lower case.
UNREACHABLE_MARKERS = (
    "connection",
    "could not connect",
    "server closed",
    "terminating",
    "timeout",
    "timed out",
    "database system is",
    "database is locked",
    "unable to open database",
    "no route to host",
    "network",
    "eof detected",
    "broken pipe",
    "reset by peer",
    "could not receive",
    "could not send",
)
# The waits between the final write's tries while the database is unreachable.
OUTAGE_FIRST_WAIT_S = 0.5
OUTAGE_LONGEST_WAIT_S = 8.0
# The longest service log line quoted in a failure reason.
LAST_LOG_LINE_CHARS = 500
# The cache fill gives up when its requests fail and the cache stores nothing new for this long.
FILL_FAILING_S = 6.0
_DIGITS = re.compile(r"\d+")

_LATENCY_COLUMNS = (
    "latency_avg_s",
    "latency_p50_s",
    "latency_p90_s",
    "latency_p95_s",
    "latency_p99_s",
    "latency_max_s",
)
# The figures kept from k6's summary when a run ends early and the full collection failed.
PARTIAL_SUMMARY_COLUMNS = (
    "requests_ok",
    "requests_failed",
    "req_per_s",
    "output_tok_per_s",
    "input_tok_per_s",
    *_LATENCY_COLUMNS,
    "iterations_completed",
    "iterations_interrupted",
)
# The same from k6's NDJSON stream when there is no readable summary.
PARTIAL_SERIES_COLUMNS = (
    "requests_ok",
    "requests_failed",
    "req_per_s",
    "output_tok_per_s",
    "measured_duration_s",
    *_LATENCY_COLUMNS,
)


class RunCancelled(Exception):
    """The user asked to cancel the run."""


class RunFailed(Exception):
    """The run cannot go on; the message says why, for the user."""


# -- failures ------------------------------------------------------------------------------
def write_failure_message(error: BaseException) -> str | None:
    """One line for a failed write (disk full, read-only, I/O error, a database error);
    None when ``error`` is something else."""
    if isinstance(error, SQLAlchemyError):
        detail = str(getattr(error, "orig", None) or error).splitlines()[0]
        return f"the database could not be written ({detail})"
    if isinstance(error, OSError) and error.errno in WRITE_FAILURE_ERRNOS:
        where = f": {error.filename}" if error.filename else ""
        return f"could not write the run's data ({error.strerror or os.strerror(error.errno)}{where})"
    return None


def is_out_of_space(problem: str) -> bool:
    """True when a write failure's message says the disk (or the quota) is full."""
    return "No space left" in problem or "disk is full" in problem or "Disk quota" in problem


def run_folder_full_note(free_bytes: int) -> str | None:
    """A sentence when ``free_bytes`` left on the run folder's disk is (nearly) nothing, else None."""
    if free_bytes >= RUN_FOLDER_MIN_FREE_BYTES:
        return None
    return (
        f"the disk holding the run folder is full ({free_bytes // 1024} kB free, No space left on device): "
        "k6 could not write all its results; free space and run again"
    )


@dataclass(frozen=True)
class FailureReason:
    """Why a run failed, for the user; ``expected`` failures are logged as one line, the
    others with their traceback."""

    reason: str
    expected: bool

    @property
    def log_line(self) -> str:
        return self.reason.splitlines()[0] if self.reason else ""


def failure_reason(error: Exception, *, disk_note: str | None) -> FailureReason:
    """The reason stored with a run that ``error`` ended; a full disk under the run folder
    (``disk_note``) comes first, as it is what the user must fix."""
    problem = write_failure_message(error)
    if disk_note:
        problem = f"{disk_note}: {problem or error}"
    # Expected failures (a full disk, a dead backend, unreadable k6 output) are not bugs.
    expected = bool(problem) or isinstance(error, (RunFailed, K6ResultsError))
    message = problem or str(error) or type(error).__name__
    return FailureReason(reason=message[-MAX_REASON_CHARS:], expected=expected)


# -- during the load -----------------------------------------------------------------------
def lost_service_failure(name: str, *, phase: str, last_log_line: str | None) -> str | None:
    """What a service dying during a phase (start-up, warm-up, cache fill, load, drain) means:
    None when the run goes on without it (a fail-open service), else the run's failure
    reason, naming the service, the phase and the service's last log line."""
    if name in FAIL_OPEN_SERVICES:
        return None
    last = (
        f"; its last log line: {last_log_line.strip()[:LAST_LOG_LINE_CHARS]}"
        if last_log_line and last_log_line.strip()
        else "; its log is empty"
    )
    return f"the {name} service died during the {phase}{last} (see its log below)"


def load_phase(*, elapsed_s: float, planned_s: float | None) -> str:
    """``load``, or ``drain`` once the planned duration is over (k6's graceful stop)."""
    return "drain" if planned_s and elapsed_s >= planned_s else "load"


def fill_failing(*, seconds_since_stored: float, failed_since_stored: int) -> bool:
    """True when the cache fill's requests fail and the cache has stored no new answer for
    ``FILL_FAILING_S`` (the upstream stopped answering; hits of answers stored before still
    succeed, so successes say nothing): waiting for the fill timeout is useless."""
    return failed_since_stored > 0 and seconds_since_stored >= FILL_FAILING_S


def load_progress(
    *,
    elapsed_s: float,
    planned_s: float | None,
    graceful_stop_s: float | None,
    vus: int | None,
    output_tokens: int | None,
    requests_ok: int,
    requests_failed: int,
    live: dict[str, Any],
) -> dict[str, Any]:
    """The progress a run shows while k6 loads: the phase (load, then draining once the
    planned duration is over: the graceful stop waits for the requests still in flight),
    the counts so far and the live charts."""
    draining = bool(planned_s) and elapsed_s >= (planned_s or 0)
    return {
        "phase": "draining" if draining else "load",
        "in_flight": vus,
        "elapsed_s": round(elapsed_s, 1),
        "planned_s": planned_s,
        "graceful_stop_s": graceful_stop_s,
        "fraction": min(1.0, elapsed_s / planned_s) if planned_s else None,
        "requests_completed": requests_ok + requests_failed,
        "requests_failed": requests_failed,
        # Successes per second, like the final figure (failures do not count).
        "req_per_s": round(requests_ok / elapsed_s, 3) if elapsed_s > 0 else None,
        "vus": vus,
        "output_tokens": output_tokens,
        "live": live,
    }


def load_failure(*, exit_code: int, summary_written: bool, exit_message: str) -> str | None:
    """Why the figures of a finished load cannot be used (None when they can): k6 failed,
    or it wrote no summary."""
    if exit_code not in K6_EXIT_CODES_WITH_FIGURES:
        return exit_message
    if not summary_written:
        return f"k6 wrote no summary: {exit_message}"
    return None


# -- after the load ------------------------------------------------------------------------
def fail_open_note(lost_services: Sequence[str], *, answers_uncached: int, answers_not_stored: int) -> str:
    """The warning of a run whose response cache lost its store and failed open."""
    return (
        f"{' and '.join(lost_services)} stopped during the run: the response cache failed open "
        f"({answers_uncached} answers served straight from the backend, "
        f"{answers_not_stored} not stored); the figures mix cached and uncached answers"
    )


def run_warnings(
    results: RunResults,
    *,
    lost_services: Sequence[str],
    cache_errors: int,
    disk_note: str | None,
    metrics_problems: Mapping[str, str],
) -> str | None:
    """The run's measurement warnings: those ``results`` hold, then a fail-open cache, a
    full run folder and each server whose /metrics could not be read."""
    notes: list[str | None] = [results.measurement_warnings]
    if lost_services:
        notes.append(
            fail_open_note(
                lost_services,
                answers_uncached=cache_errors,
                answers_not_stored=results.response_cache_store_errors or 0,
            )
        )
    if disk_note:
        notes.append(f"{disk_note}: the per-second series may be incomplete")
    for name, problem in metrics_problems.items():
        notes.append(
            f"the {name.replace('_', ' ')}'s {problem}: its server-side figures are missing, the client's (k6) are kept"
        )
    return join_warnings(*notes)


def most_common_error_answer(error_answers: Mapping[str, int]) -> tuple[str, int] | None:
    """The most common error answer of the failed requests and how many got one like it:
    answers differing only in their numbers (a context error names each prompt's length)
    count as one, quoted by the most frequent of them. None when no answer was recorded."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for answer, count in error_answers.items():
        groups.setdefault(_DIGITS.sub("N", answer), []).append((count, answer))
    if not groups:
        return None
    members = max(groups.values(), key=lambda group: (sum(count for count, _ in group), max(group)))
    return max(members)[1], sum(count for count, _ in members)


def final_state(results: RunResults, *, error_answers: Mapping[str, int] | None = None) -> tuple[str, str | None]:
    """(status, reason) of a run whose load ended: done, or failed when no request succeeded,
    quoting the most common error answer when requests failed (a context error is not cured
    by a longer duration)."""
    if results.requests_ok:
        return RunStatus.DONE, None
    failed = results.requests_failed or 0
    counts = f"{failed} failed, {results.iterations_interrupted or 0} still in flight at the end"
    common = most_common_error_answer(error_answers or {})
    if failed and common is not None:
        answer, times = common
        return (
            RunStatus.FAILED,
            f"no request completed successfully ({counts}); the most common error answer "
            f"({times} of {failed}): {answer}"[:MAX_REASON_CHARS],
        )
    if failed:
        return RunStatus.FAILED, f"no request completed successfully ({counts}): check the backend's log"
    return RunStatus.FAILED, (
        f"no request completed successfully ({counts}): lengthen the duration or the graceful stop, "
        "or check the backend's log"
    )


def partial_columns(figures: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The figures a run ended early keeps (``PARTIAL_SUMMARY_COLUMNS`` or ``PARTIAL_SERIES_COLUMNS``)."""
    return {name: figures.get(name) for name in names}


# -- the final write -----------------------------------------------------------------------
def final_values(status: str, *, reason: str | None, columns: Mapping[str, Any], finished_at: Any) -> dict[str, Any]:
    """What the final write of a run stores: its state, no progress, the end time, its figures."""
    values: dict[str, Any] = {"status": status, "progress": None, "finished_at": finished_at, **columns}
    if reason is not None:
        values["reason"] = reason
    return values


def database_unreachable(error: BaseException) -> bool:
    """True when ``error`` says the database cannot be reached now (stopped, restarting, the
    network, a lock held too long): worth waiting for, unlike a full disk or a refused figure."""
    if not isinstance(error, DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    if not isinstance(error, (OperationalError, InterfaceError)):
        return False
    message = str(error.orig or error)
    return not is_out_of_space(message) and any(marker in message.lower() for marker in UNREACHABLE_MARKERS)


def next_final_write_delay_s(
    attempt: int, *, unreachable: bool, remaining_s: float, delays_s: Sequence[float]
) -> float | None:
    """Seconds to wait before try ``attempt`` + 1 after ``attempt`` failures, or None to stop:
    an unreachable database is tried with waits from 0.5 s doubling to 8 s while
    ``remaining_s`` lasts; other failures after ``delays_s``, then no more."""
    if unreachable:
        if remaining_s <= 0:
            return None
        return float(min(OUTAGE_FIRST_WAIT_S * 2 ** max(attempt - 1, 0), OUTAGE_LONGEST_WAIT_S, remaining_s))
    return float(delays_s[attempt - 1]) if 1 <= attempt <= len(delays_s) else None


def frees_space_before(attempt: int, problem: str) -> bool:
    """True before the third try when the disk is full: the run's regenerable files go."""
    return attempt == 2 and is_out_of_space(problem)


def with_space_freed(values: dict[str, Any], freed: str) -> dict[str, Any]:
    """``values`` whose reason says which files were removed to make room for it."""
    return {
        **values,
        "reason": f"{values.get('reason') or values['status']} ({freed} removed to free space for this record)",
    }


def final_write_attempt(values: Mapping[str, Any], *, attempt: int, problem: str) -> dict[str, Any]:
    """What try ``attempt`` (from 0) writes: the whole final state, then, after
    ``FINAL_WRITE_TRIES_WITH_FIGURES`` failures, without the figures (the large part, maybe
    what cannot be written), saying why."""
    if attempt < FINAL_WRITE_TRIES_WITH_FIGURES:
        return dict(values)
    bare = {key: values[key] for key in BARE_FINAL_COLUMNS if key in values}
    return {**bare, "reason": f"{bare.get('reason') or values['status']} (its figures could not be saved: {problem})"}
