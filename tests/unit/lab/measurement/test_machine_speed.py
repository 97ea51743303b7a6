"""The machine-speed figure: the kernel runs, and indices are relative to the median run."""

import pytest

from lab.measurement.machine_speed import calibration_s, run_calibration_s, speed_indices


@pytest.mark.integration  # the kernel runs in a child Python process
@pytest.mark.timing
def test_the_kernel_takes_a_positive_number_of_seconds_scaled_to_its_full_length() -> None:
    full_s, one_s = calibration_s(), calibration_s(1)
    assert full_s is not None and 0 < full_s < 60
    # One repetition, scaled by 20: the same figure within the host's noise (2-3x here).
    assert one_s is not None and full_s / 5 < one_s < full_s * 5
    assert calibration_s(0) is None  # none asked for: the run goes on without the figure


def test_indices_are_one_at_the_median_and_below_one_for_a_slower_run() -> None:
    indices = speed_indices({1: 1.0, 2: 1.0, 3: 2.0, 4: None})
    assert indices[1] == pytest.approx(1.0) and indices[2] == pytest.approx(1.0)
    assert indices[3] == pytest.approx(0.5)  # the kernel took twice as long: half the speed
    assert indices[4] is None


def test_a_runs_calibration_is_the_mean_of_before_and_after() -> None:
    assert run_calibration_s(1.0, 3.0) == pytest.approx(2.0)
    assert run_calibration_s(None, 3.0) == pytest.approx(3.0)
    assert run_calibration_s(None, None) is None
