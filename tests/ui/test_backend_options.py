"""The New experiment grid shows each chosen backend's declared options in an expander of
its own, refuses a bad value right under its field (queueing nothing) and puts good values
in the queued runs' backend sections."""

from __future__ import annotations

from typing import Any

from tests.support.app_pages import PAGES, open_page, runs_in_db, seen, widget
from tests.support.seeded_lab import SeededLab

N_CTX_KEY = "grid_backend_llamacpp.n_ctx"
BLOCK_SIZE_KEY = "grid_backend_vllm.block_size"


def expander(app: Any, label: str) -> Any:
    """The expander with ``label``."""
    matches = [block for block in app.expander if block.label == label]
    assert matches, f"no expander {label!r}; expanders: {[block.label for block in app.expander]}"
    return matches[0]


def element_after(block: Any, key: str) -> Any:
    """What the page draws right after the widget with ``key`` in ``block`` (its message, if any)."""
    children = list(block.children.values())
    index = next(position for position, child in enumerate(children) if getattr(child, "key", None) == key)
    return children[index + 1] if index + 1 < len(children) else None


def test_only_the_chosen_backends_options_are_shown(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    widget(app.multiselect, "grid_backends").set_value(["llamacpp", "vllm+cache", "external"]).run()
    assert [block.label for block in app.expander if block.label.endswith(" options")] == [
        "llama.cpp options",
        "vLLM options",
    ]  # the external kind declares none
    llamacpp = expander(app, "llama.cpp options")
    assert widget(llamacpp.number_input, N_CTX_KEY).value == 4096  # the options model's default
    assert widget(llamacpp.number_input, "grid_backend_llamacpp.n_threads").value is None  # all cores
    assert widget(expander(app, "vLLM options").selectbox, "grid_backend_vllm.dtype").value == "best"
    widget(app.multiselect, "grid_backends").set_value(["naive"]).run()
    assert [block.label for block in app.expander if block.label.endswith(" options")] == [
        "Transformers (naive) options"
    ]


def test_a_bad_backend_option_is_refused_beside_it_and_a_good_one_reaches_the_spec(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    widget(app.multiselect, "grid_backends").set_value(["llamacpp", "vllm+cache"]).run()
    widget(app.number_input, N_CTX_KEY).set_value(64).run()
    widget(app.text_input, "grid_name").input("backend options grid").run()
    before = len(runs_in_db(seed_lab))
    widget(app.button, "launch_grid").click().run()
    assert not app.exception
    message = element_after(expander(app, "llama.cpp options"), N_CTX_KEY)
    assert message is not None and message.type == "error"
    assert seen(message.value) == "n ctx: Input should be greater than or equal to 128"
    assert "Fix the fields marked above, then launch again." in [seen(error.value) for error in app.error]
    assert len(runs_in_db(seed_lab)) == before

    widget(app.number_input, N_CTX_KEY).set_value(2048).run()
    widget(app.text_input, BLOCK_SIZE_KEY).input("64").run()
    widget(app.checkbox, "grid_backend_vllm.enforce_eager").uncheck().run()
    widget(app.button, "launch_grid").click().run()
    assert not app.exception
    assert [heading.value for heading in app.title] == ["Runs"]
    new = {
        run.backend: run
        for run in runs_in_db(seed_lab)
        if run.experiment and run.experiment.name == "backend options grid"
    }
    assert sorted(new) == ["llamacpp", "vllm+cache"] and len(runs_in_db(seed_lab)) - before == 2
    for run in new.values():  # every cell carries every chosen kind's section
        assert run.spec["llamacpp"]["n_ctx"] == 2048
        assert run.spec["vllm"]["block_size"] == 64 and run.spec["vllm"]["enforce_eager"] is False
