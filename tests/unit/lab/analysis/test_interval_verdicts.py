"""A verdict is given only when the whole interval lies on one side of the rule."""

from lab.analysis.interval_verdicts import Verdict, interval_verdict, verdicts_over


def at_least_twenty(value: float) -> Verdict:
    if value != value:  # NaN: nothing measured
        return Verdict.NOT_MEASURED
    return Verdict.HELD if value >= 20.35 else Verdict.NOT_HELD


def test_an_interval_on_one_side_gets_that_sides_verdict() -> None:
    assert interval_verdict(at_least_twenty, 30.0, 25.0, 40.0) == "held"
    assert interval_verdict(at_least_twenty, 10.0, 5.0, 15.0) == "did not hold"


def test_an_interval_across_the_threshold_is_inconclusive() -> None:
    # The seed-scale case: 20.7x clears 20.35x, but the interval reaches far below it.
    assert interval_verdict(at_least_twenty, 20.7, 6.0, 80.0) == Verdict.INCONCLUSIVE


def test_without_an_interval_the_point_is_judged() -> None:
    assert interval_verdict(at_least_twenty, 20.7, None, None) == "held"
    assert interval_verdict(at_least_twenty, None, None, None) == "not measured"


def test_a_band_rule_finds_every_verdict_inside_the_interval() -> None:
    def within_factor_two_of_ten(value: float) -> Verdict:
        return Verdict.HELD if 5 <= value <= 20 else (Verdict.PARTLY if value > 1.1 else Verdict.NOT_HELD)

    assert verdicts_over(within_factor_two_of_ten, 2.0, 30.0) == ["partly", "held"]
    assert interval_verdict(within_factor_two_of_ten, 10.0, 6.0, 19.0) == "held"
    assert interval_verdict(within_factor_two_of_ten, 10.0, 4.9, 19.0) == Verdict.INCONCLUSIVE


def test_a_verdict_s_identity_is_not_its_display_text() -> None:
    # The stored identity stays what reports always wrote; the text a reader sees is separate.
    assert Verdict("did not hold here (hardware)") is Verdict.NOT_HELD_HARDWARE
    assert all(isinstance(verdict.text, str) and verdict.text for verdict in Verdict)
