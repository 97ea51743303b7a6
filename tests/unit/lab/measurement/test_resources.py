"""Host CPU shares: busy, steal and the part other processes used."""

from collections import namedtuple

import pytest

from lab.measurement.resources import host_cpu_shares, summarise_host

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")


def times(user=0.0, system=0.0, idle=0.0, iowait=0.0, steal=0.0, guest=0.0):
    return Times(user, 0.0, system, idle, iowait, 0.0, 0.0, steal, guest, 0.0)


def test_two_busy_cores_read_200_and_own_use_is_subtracted():
    shares = host_cpu_shares(times(), times(user=1.5, system=0.5), cores=2, own_cpu_percent=60.0)
    assert shares["host_cpu_percent"] == pytest.approx(200.0)
    assert shares["other_cpu_percent"] == pytest.approx(140.0)
    assert shares["steal_cpu_percent"] == pytest.approx(0.0)


def test_idle_iowait_and_steal_are_not_busy_and_guest_is_not_counted_twice():
    # 4 s of 2 cores: 1 s user (0.5 of it guest), 2 s idle, 0.5 s iowait, 0.5 s steal.
    shares = host_cpu_shares(
        times(), times(user=1.0, idle=2.0, iowait=0.5, steal=0.5, guest=0.5), cores=2, own_cpu_percent=0.0
    )
    assert shares["host_cpu_percent"] == pytest.approx(50.0)
    assert shares["steal_cpu_percent"] == pytest.approx(25.0)


def test_own_use_above_busy_never_gives_negative_other():
    shares = host_cpu_shares(times(), times(user=0.1, idle=1.9), cores=2, own_cpu_percent=30.0)
    assert shares["other_cpu_percent"] == 0.0


def test_no_elapsed_time_gives_unknown():
    assert host_cpu_shares(times(), times(), cores=2, own_cpu_percent=0)["host_cpu_percent"] is None


def test_summarise_host_skips_first_sample_and_unknowns():
    samples = [
        {"host_cpu_percent": 0.0, "other_cpu_percent": 0.0, "steal_cpu_percent": 0.0},
        {"host_cpu_percent": 100.0, "other_cpu_percent": 40.0, "steal_cpu_percent": None},
        {"host_cpu_percent": 120.0, "other_cpu_percent": 60.0, "steal_cpu_percent": None},
    ]
    assert summarise_host(samples) == {
        "host_cpu_percent_avg": 110.0,
        "other_cpu_percent_avg": 50.0,
        "steal_cpu_percent_avg": None,
    }
