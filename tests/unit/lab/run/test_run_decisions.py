"""A run's decisions without processes: failure reasons, when the load stops, the warnings,
the partial figures kept, the final state and what each try of the final write stores."""

from __future__ import annotations

import errno
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from db.models import RunStatus
from lab.measurement.k6_results import K6ResultsError
from lab.measurement.results import RunResults
from lab.run import decisions
from lab.run.decisions import RunFailed

DISK_FULL = OSError(errno.ENOSPC, "No space left on device", "/data/runs/3/k6.ndjson")


# -- failures ------------------------------------------------------------------------------
def test_write_failures_are_one_line_and_other_errors_are_not_write_failures() -> None:
    assert (
        decisions.write_failure_message(DISK_FULL)
        == "could not write the run's data (No space left on device: /data/runs/3/k6.ndjson)"
    )
    database = OperationalError("UPDATE runs", {}, Exception("database or disk is full\nmore"))
    assert decisions.write_failure_message(database) == "the database could not be written (database or disk is full)"
    assert decisions.write_failure_message(OSError(errno.ENOENT, "No such file")) is None
    assert decisions.write_failure_message(ValueError("bad")) is None


def test_a_full_disk_is_told_apart_from_other_write_failures() -> None:
    assert decisions.is_out_of_space("could not write the run's data (No space left on device)")
    assert decisions.is_out_of_space("the database could not be written (database or disk is full)")
    assert not decisions.is_out_of_space("the database could not be written (disk I/O error)")


def test_the_run_folder_is_full_below_one_mebibyte() -> None:
    assert decisions.run_folder_full_note(decisions.RUN_FOLDER_MIN_FREE_BYTES) is None
    note = decisions.run_folder_full_note(10 * 1024)
    assert note is not None and note.startswith("the disk holding the run folder is full (10 kB free")


def test_a_failures_reason_puts_a_full_disk_first_and_tells_expected_failures_apart() -> None:
    dead = decisions.failure_reason(RunFailed("the naive service died\nits log"), disk_note=None)
    assert dead == decisions.FailureReason("the naive service died\nits log", expected=True)
    assert dead.log_line == "the naive service died"
    assert decisions.failure_reason(K6ResultsError("summary truncated"), disk_note=None).expected
    bug = decisions.failure_reason(KeyError("x"), disk_note=None)
    assert bug.reason == "'x'" and not bug.expected  # logged with its traceback
    assert decisions.failure_reason(KeyError(), disk_note=None).reason == "KeyError"
    full = decisions.failure_reason(DISK_FULL, disk_note="the disk holding the run folder is full")
    assert full.reason.startswith("the disk holding the run folder is full: could not write the run's data")
    assert full.expected


def test_a_long_reason_keeps_its_end() -> None:
    reason = decisions.failure_reason(RunFailed("x" * 5000 + "the cause"), disk_note=None).reason
    assert len(reason) == decisions.MAX_REASON_CHARS and reason.endswith("the cause")


# -- during the load -----------------------------------------------------------------------
def test_losing_redis_lets_the_run_go_on_losing_the_backend_fails_it() -> None:
    assert decisions.lost_service_failure("redis", phase="load", last_log_line="x") is None
    assert decisions.lost_service_failure("vllm", phase="cache fill", last_log_line="  INFO: Killed \n") == (
        "the vllm service died during the cache fill; its last log line: INFO: Killed (see its log below)"
    )
    assert decisions.lost_service_failure("naive", phase="warm-up", last_log_line=None) == (
        "the naive service died during the warm-up; its log is empty (see its log below)"
    )
    long_line = decisions.lost_service_failure("naive", phase="load", last_log_line="y" * 5000)
    assert long_line is not None
    assert long_line.count("y") == decisions.LAST_LOG_LINE_CHARS


def test_the_load_phase_turns_to_drain_at_the_planned_end() -> None:
    assert decisions.load_phase(elapsed_s=9.9, planned_s=10.0) == "load"
    assert decisions.load_phase(elapsed_s=10.0, planned_s=10.0) == "drain"
    assert decisions.load_phase(elapsed_s=50.0, planned_s=None) == "load"


def test_a_fill_gives_up_only_when_its_requests_fail_and_nothing_new_is_stored() -> None:
    assert not decisions.fill_failing(seconds_since_stored=60.0, failed_since_stored=0)  # slow, not failing
    assert not decisions.fill_failing(seconds_since_stored=decisions.FILL_FAILING_S - 1, failed_since_stored=9)
    assert decisions.fill_failing(seconds_since_stored=decisions.FILL_FAILING_S, failed_since_stored=1)


def test_the_progress_shows_the_load_then_the_drain() -> None:
    common: dict[str, Any] = dict(planned_s=10.0, graceful_stop_s=5.0, vus=4, output_tokens=100, live={"t": []})
    loading = decisions.load_progress(elapsed_s=4.0, requests_ok=8, requests_failed=2, **common)
    assert loading["phase"] == "load" and loading["fraction"] == pytest.approx(0.4)
    assert (loading["requests_completed"], loading["requests_failed"], loading["req_per_s"]) == (10, 2, 2.0)
    draining = decisions.load_progress(elapsed_s=12.0, requests_ok=24, requests_failed=0, **common)
    assert draining["phase"] == "draining" and draining["fraction"] == 1.0 and draining["in_flight"] == 4
    unplanned = decisions.load_progress(
        elapsed_s=0.0, requests_ok=0, requests_failed=0, **{**common, "planned_s": None}
    )
    assert unplanned["phase"] == "load" and unplanned["fraction"] is None and unplanned["req_per_s"] is None


def test_a_load_fails_when_k6_fails_or_writes_no_summary() -> None:
    assert decisions.load_failure(exit_code=0, summary_written=True, exit_message="k6 finished") is None
    assert decisions.load_failure(exit_code=99, summary_written=True, exit_message="thresholds crossed") is None
    assert decisions.load_failure(exit_code=107, summary_written=True, exit_message="script error") == "script error"
    assert (
        decisions.load_failure(exit_code=0, summary_written=False, exit_message="k6 finished")
        == "k6 wrote no summary: k6 finished"
    )


# -- after the load ------------------------------------------------------------------------
def test_the_warnings_keep_the_measurements_then_add_the_runs_own() -> None:
    results = RunResults(measurement_warnings="k6 used 90% CPU", response_cache_store_errors=3)
    warnings = decisions.run_warnings(
        results,
        lost_services=["redis"],
        cache_errors=7,
        disk_note="the disk is full",
        metrics_problems={"cache_proxy": "/metrics answered HTTP 404"},
    )
    expected_in_order = [
        "k6 used 90% CPU; ",
        "redis stopped during the run: the response cache failed open (7 answers served straight from the backend, "
        "3 not stored); the figures mix cached and uncached answers; ",
        "the disk is full: the per-second series may be incomplete; ",
        "the cache proxy's /metrics answered HTTP 404: its server-side figures are missing, the client's (k6) are kept",
    ]
    assert warnings == "".join(expected_in_order)
    assert (
        decisions.run_warnings(RunResults(), lost_services=[], cache_errors=0, disk_note=None, metrics_problems={})
        is None
    )


def test_a_run_without_a_success_fails_with_its_counts() -> None:
    assert decisions.final_state(RunResults(requests_ok=3)) == (RunStatus.DONE, None)
    status, reason = decisions.final_state(RunResults(requests_ok=0, requests_failed=5, iterations_interrupted=2))
    assert status == RunStatus.FAILED and reason is not None
    assert reason.startswith("no request completed successfully (5 failed, 2 still in flight at the end)")
    assert "check the backend's log" in reason and "lengthen the duration" not in reason  # failures, not time
    _, in_flight_only = decisions.final_state(RunResults(requests_ok=0, requests_failed=0, iterations_interrupted=2))
    assert in_flight_only is not None
    assert "lengthen the duration or the graceful stop" in in_flight_only


CONTEXT_ERROR = (
    "400 This model's maximum context length is 8192 tokens. However, you requested {n} tokens "
    "({m} in the messages, 64 in the completion)."
)


def test_a_run_whose_requests_all_failed_quotes_the_most_common_error_answer() -> None:
    answers = {
        CONTEXT_ERROR.format(n=9064, m=9000): 3,
        CONTEXT_ERROR.format(n=9100, m=9036): 2,
        "no answer: request timeout": 4,
    }
    status, reason = decisions.final_state(RunResults(requests_ok=0, requests_failed=9), error_answers=answers)
    # Answers differing only in numbers are one answer (5 of 9), quoted by its most frequent form.
    assert status == RunStatus.FAILED
    assert reason == (
        "no request completed successfully (9 failed, 0 still in flight at the end); the most common "
        f"error answer (5 of 9): {CONTEXT_ERROR.format(n=9064, m=9000)}"
    )
    assert "lengthen" not in reason
    assert decisions.most_common_error_answer({}) is None
    assert decisions.most_common_error_answer({"503 busy": 1, "500 boom": 2}) == ("500 boom", 2)


def test_the_partial_columns_are_the_named_figures_only() -> None:
    figures = {"requests_ok": 4, "latency_p95_s": 0.5, "k6_cpu_percent_avg": 30.0}
    kept = decisions.partial_columns(figures, decisions.PARTIAL_SUMMARY_COLUMNS)
    assert set(kept) == set(decisions.PARTIAL_SUMMARY_COLUMNS)
    assert (kept["requests_ok"], kept["latency_p95_s"], kept["requests_failed"]) == (4, 0.5, None)
    assert "measured_duration_s" in decisions.partial_columns(figures, decisions.PARTIAL_SERIES_COLUMNS)


# -- the final write -----------------------------------------------------------------------
def test_the_final_write_drops_the_figures_after_three_failed_tries() -> None:
    values = decisions.final_values(RunStatus.DONE, reason=None, columns={"requests_ok": 12}, finished_at="now")
    assert values == {"status": "done", "progress": None, "finished_at": "now", "requests_ok": 12}
    for attempt in range(decisions.FINAL_WRITE_TRIES_WITH_FIGURES):
        assert decisions.final_write_attempt(values, attempt=attempt, problem="disk I/O error") == values
    assert decisions.final_write_attempt(values, attempt=3, problem="disk I/O error") == {
        "status": "done",
        "progress": None,
        "finished_at": "now",
        "reason": "done (its figures could not be saved: disk I/O error)",
    }


def test_a_full_disk_frees_the_runs_regenerable_files_before_the_third_try() -> None:
    assert decisions.frees_space_before(2, "could not write the run's data (No space left on device)")
    assert not decisions.frees_space_before(1, "could not write the run's data (No space left on device)")
    assert not decisions.frees_space_before(2, "the database could not be written (disk I/O error)")
    values = decisions.final_values(RunStatus.FAILED, reason="k6 was killed", columns={}, finished_at="now")
    freed = decisions.with_space_freed(values, "k6.ndjson")
    assert freed["reason"] == "k6 was killed (k6.ndjson removed to free space for this record)"
    assert (
        decisions.final_write_attempt(freed, attempt=3, problem="disk full")["reason"]
        == "k6 was killed (k6.ndjson removed to free space for this record) (its figures could not be saved: disk full)"
    )


def test_count_checks_allow_for_requests_in_flight_and_skip_tokens_when_most_were() -> None:
    from lab.run.figures import count_checks

    backend = {"server_e2e_requests": 40, "server_output_tokens": 5200, "server_prompt_tokens": 9000}
    few_in_flight = {"requests_total": 32, "requests_interrupted": 8, "output_tokens": 4096, "input_tokens": 1600}
    checks = count_checks(few_in_flight, backend=backend, cache=None, max_tokens=128)
    assert checks["requests"]["in_flight_allowance"] == 8  # the server may count the 8 k6 abandoned
    assert checks["output_tokens"]["in_flight_allowance"] == 8 * 128
    assert checks["input_tokens"]["in_flight_allowance"] == 8 * 50 * 4  # 4 mean prompts each
    # The seed's chat at quick scale here: 5 finished, 32 still running with long later turns.
    mostly_in_flight = {"requests_total": 5, "requests_interrupted": 32, "output_tokens": 640, "input_tokens": 239}
    checks = count_checks(mostly_in_flight, backend=backend, cache=None, max_tokens=128)
    assert set(checks) == {"requests"}
