"""A workload registered here, in the test module alone, shows its own option fields in the
New experiment form (derived from its options model), is checked beside them and queues
runs carrying its option section. ``tests/integration/test_workload_plugin.py`` runs it
end to end. No other file names it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lab.workloads import register, unregister
from tests.support.app_pages import PAGES, open_page, runs_in_db, seen, widget
from tests.support.count_up import KIND, SECTION, CountUp
from tests.support.seeded_lab import SeededLab


@pytest.fixture()
def count_up() -> Iterator[str]:
    register(CountUp)
    try:
        yield KIND
    finally:
        unregister(KIND)


def test_a_registered_workload_shows_its_own_fields_checks_them_and_queues_its_section(
    seed_lab: SeededLab, count_up: str
) -> None:
    app = open_page(PAGES["New experiment"])
    widget(app.selectbox, "grid_workload").set_value(KIND).run()
    labels = [number.label for number in app.number_input]
    assert "Counting prompts" in labels and "First number" in labels
    assert "PROMPTS (distinct numbers)" not in labels  # the number story's field is gone
    prompts_key = f"grid_{KIND}_{SECTION}.prompts"
    assert widget(app.number_input, prompts_key).value == 3  # the model's default

    widget(app.number_input, prompts_key).set_value(0).run()
    widget(app.button, "launch_grid").click().run()
    assert not app.exception
    assert "prompts: Input should be greater than or equal to 1" in [seen(error.value) for error in app.error]

    before = len(runs_in_db(seed_lab))
    widget(app.number_input, prompts_key).set_value(4).run()
    widget(app.number_input, f"grid_{KIND}_{SECTION}.start").set_value(7).run()
    widget(app.text_input, "grid_name").input("count up grid").run()
    widget(app.button, "launch_grid").click().run()
    assert not app.exception
    assert [heading.value for heading in app.title] == ["Runs"]
    new = [run for run in runs_in_db(seed_lab) if run.experiment and run.experiment.name == "count up grid"]
    assert len(runs_in_db(seed_lab)) - before == len(new) == 1
    assert new[0].workload == KIND
    assert new[0].spec["workload"][SECTION] == {"prompts": 4, "start": 7}


def test_its_options_are_named_in_the_set_help(count_up: str) -> None:
    from lab.cli.entry import build_parser

    subparsers = build_parser()._subparsers
    assert subparsers is not None
    commands = subparsers._group_actions[0].choices
    assert isinstance(commands, dict)
    run_help = commands["run"].format_help()
    assert f"workload.{SECTION}.prompts ({KIND})" in " ".join(run_help.split())
