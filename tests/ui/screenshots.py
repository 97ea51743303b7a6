"""Screenshots of every page from a real small experiment, for docs/screenshots/ (not a test).

One command takes them all again::

    .venv/bin/python -m tests.ui.screenshots docs/screenshots

It starts the lab (``python -m lab start``: Streamlit and the worker) on a free loopback port
with a temporary data folder, runs a real small experiment through the CLI (seed-exp1 at the
quick scale on the naive server only, 1 and 2 VUs, 8 s each: the cheapest real backend), replays
the sample trace on the same server, imports a GuideLLM report beside them and runs the
experiment again as a long experiment until decided (for the Reproduce tab's table), then
photographs each page in Debian's Chromium at 1280x800 and at 800 px wide. It also reads each
page as a person would and prints every problem it finds (and exits 1): a metric tile whose
value or label is cut, a link cut short, a button or widget label cut or off the right edge, a
code span broken over two lines, a table whose columns run off its frame (a verdict out of sight),
a chart legend over an axis title or the chart title, a machine column name or a machine's
absolute path in the text, and at
1280x800 a New experiment whose Launch button is below the fold.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, PROJECT_ROOT, lab_env, running_lab, wait_for_app

# (file name, path under the lab's URL, text that says the page is drawn, the tab to open or "")
PAGES: tuple[tuple[str, str, str, str], ...] = (
    ("new-experiment", "", "Launching queues runs", ""),
    ("reproduce", "", "Launching queues runs", "Reproduce the seed"),
    ("runs", "runs", "Filters", ""),
    ("run-detail", "run_detail?run=1", "Per second", ""),
    ("compare", "compare", "Charts", ""),
    # A number-story run, the trace replay and an imported GuideLLM run side by side (runs #1, #3
    # and #4 of the fresh database: the experiment's first run, the replay, the first import).
    ("compare-imported", "compare?runs=1,3,4", "Charts", ""),
    ("trends", "trends", "Trends", ""),
    ("services", "services", "Start a service", ""),
    ("workers", "workers", "workers alive", ""),
)
VIEWPORTS = {"1280": {"width": 1280, "height": 800}, "800": {"width": 800, "height": 800}}
EXPERIMENT = [
    "--preset",
    "seed-exp1",
    "--quick",
    "--set",
    'grid.backend=["naive"]',
    "--set",
    "grid.load.vus=[1, 2]",
    "--set",
    "load.duration_s=8",
    "--set",
    "max_tokens=16",
    "--set",
    "load.graceful_stop_s=60",
]
# A trace replayed on the same server, so Compare's picker shows a replay's label too.
TRACE_SPEC = {
    "name": "the sample trace on the naive server",
    "base": {
        "backend": "naive",
        "workload": {
            "kind": "trace",
            "trace": {"path": "tests/fixtures/traces/mooncake_sample.jsonl", "block_tokens": 32},
        },
        "load": {"duration_s": 8, "max_vus": 4, "graceful_stop_s": 60},
        "max_tokens": 16,
    },
    "grid": {"backend": ["naive"]},
    "repeats": 1,
}
# A GuideLLM report (written by the real tool against its mock server), imported beside them.
IMPORTED = "tests/fixtures/imports/guidellm.json"
# Machine names that must never reach a person's eye.
MACHINE_NAMES = (
    "output_tok_per_s",
    "req_per_s",
    "latency_p95_s",
    "latency_avg_s",
    "cell_label",
    "run_id",
    "worker_name",
    "requests_failed",
    "ttft_hit_avg_s",
    "slo_evaluated",
)

# Tables (by key prefix) that carry a verdict or a figure at their right end (Compare's cost):
# every column on screen, no sideways scroll.
VERDICT_TABLES = ("compare_ratios", "compare_seed_ratios", "baseline_changes", "compare_cost")

PROBLEMS_JS = """() => {
  const VERDICT_TABLES = VERDICT_TABLES_JSON;
  const problems = [];
  // Visually hidden helpers (1 px wide, for screen readers) are not text a person reads.
  const cut = e => e.clientWidth > 1 && e.scrollWidth > e.clientWidth + 1;
  for (const m of document.querySelectorAll('[data-testid="stMetric"]')) {
    const label = m.querySelector('[data-testid="stMetricLabel"]');
    const value = m.querySelector('[data-testid="stMetricValue"]');
    const deep = e => e && (cut(e) || Array.from(e.querySelectorAll('*')).some(cut));
    if (deep(value)) problems.push('metric value cut: ' + label.innerText + ' = ' + value.innerText);
    if (deep(label)) problems.push('metric label cut: ' + label.innerText);
  }
  for (const link of document.querySelectorAll('[data-testid="stPageLink"]')) {
    if (cut(link) || Array.from(link.querySelectorAll('*')).some(cut)) problems.push('link cut: ' + link.innerText);
  }
  // Past the right edge of the page (or of the main area's scroller): off-screen.
  const right = Math.min(window.innerWidth, document.documentElement.clientWidth);
  const offScreen = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.right > right + 1; };
  const deepCut = e => cut(e) || Array.from(e.querySelectorAll('*')).some(cut);
  for (const button of document.querySelectorAll('[data-testid="stMain"] button')) {
    if (!button.innerText.trim()) { continue; }  // icon buttons (toolbar, help)
    if (deepCut(button)) problems.push('button cut: ' + button.innerText.trim());
    else if (offScreen(button)) problems.push('button off-screen: ' + button.innerText.trim());
  }
  const labels = '[data-testid="stWidgetLabel"], label[data-baseweb="checkbox"], [data-testid="stCheckbox"] label';
  for (const label of document.querySelectorAll(labels)) {
    if (!label.innerText.trim()) { continue; }
    if (deepCut(label)) problems.push('label cut: ' + label.innerText.trim());
    else if (offScreen(label)) problems.push('label off-screen: ' + label.innerText.trim());
  }
  // A code span broken inside (at its hyphens): `--baseline` split over two lines.
  const codes = '[data-testid="stMain"] p code, [data-testid="stCaptionContainer"] code';
  for (const code of document.querySelectorAll(codes)) {
    if (code.getClientRects().length > 1) problems.push('code broken over lines: ' + code.innerText);
  }
  // Tables with a verdict column must show all their columns; any table must stay on the page.
  document.querySelectorAll('[data-testid="stDataFrame"]').forEach((frame, index) => {
    const holder = frame.closest('[class*="st-key-"]');
    const key = holder ? Array.from(holder.classList).find(c => c.startsWith('st-key-')).slice(7) : '';
    const scroller = frame.querySelector('.dvn-scroller') || frame;
    if (VERDICT_TABLES.some(prefix => key.startsWith(prefix)) && scroller.scrollWidth > scroller.clientWidth + 1) {
      problems.push('table columns off-screen: ' + key + ' is ' + scroller.scrollWidth + ' px wide in '
                    + scroller.clientWidth + ' px (its verdict out of sight)');
    }
    if (offScreen(frame)) problems.push('table off-screen: ' + (key || 'table ' + (index + 1)));
  });
  const overlap = (a, b) => a && b && a.width && b.width && !(a.right <= b.left || b.right <= a.left
                                                               || a.bottom <= b.top || b.bottom <= a.top);
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const legend = plot.querySelector('.legend');
    const box = legend ? legend.getBoundingClientRect() : null;
    const title = (plot.querySelector('.gtitle') || {textContent: '?'}).textContent;
    for (const sel of ['.g-xtitle', '.g-ytitle', '.gtitle', '.xtick', '.ytick']) {
      for (const other of plot.querySelectorAll(sel)) {
        if (overlap(box, other.getBoundingClientRect())) problems.push('legend over ' + sel + ' in "' + title + '"');
      }
    }
  }
  return problems;
}""".replace("VERDICT_TABLES_JSON", json.dumps(list(VERDICT_TABLES)))


# A published screenshot names no machine's folder (a model is shown by its name).
ABSOLUTE_PATH = re.compile(r"(?<![\w:/.])/(?:work|root|home|tmp|srv|opt|usr|var|mnt)/[^\s'\"]*")


def launch_above_the_fold(page) -> list[str]:
    """At 1280x800, New experiment's Launch button must be on the first screen."""
    button = page.get_by_role("button", name="Launch preset").first
    box = button.bounding_box()
    return [] if box and box["y"] + box["height"] <= 800 else [f"Launch preset below the fold: {box}"]


# Streamlit scrolls its main area, not the document: a full-page shot needs a viewport that tall.
CONTENT_HEIGHT_JS = """() => Math.max(...Array.from(document.querySelectorAll(
  '[data-testid="stMain"], [data-testid="stMainBlockContainer"], [data-testid="stSidebarContent"]'))
  .map(e => e.scrollHeight + e.getBoundingClientRect().top))"""


def shoot_whole_page(page, path: Path, viewport: dict) -> None:
    """The page from top to bottom (the viewport stretched to the content), then the viewport back."""
    height = max(viewport["height"], int(page.evaluate(CONTENT_HEIGHT_JS)))
    page.set_viewport_size({"width": viewport["width"], "height": min(height, 12_000)})
    page.wait_for_timeout(1500)  # charts re-laid out
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(viewport)


def photograph(url: str, out: Path) -> list[str]:
    """Every page at both widths: a full-page PNG each, and the problems found on it."""
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for width, viewport in VIEWPORTS.items():
            page = browser.new_page(viewport=viewport)
            for name, path, text, tab in PAGES:
                page.goto(f"{url}/{path}")
                wait_for_app(page, text)
                if tab:
                    page.get_by_role("tab", name=tab).click()
                    page.wait_for_timeout(1000)
                page.wait_for_timeout(3000)  # charts drawn, fragments settled
                found = page.evaluate(PROBLEMS_JS)
                body = page.inner_text("body")
                found += [f"machine name shown: {n}" for n in MACHINE_NAMES if n in body]
                found += [f"a machine's path shown: {p}" for p in sorted(set(ABSOLUTE_PATH.findall(body)))]
                if name == "new-experiment" and width == "1280":
                    found += launch_above_the_fold(page)
                problems += [f"{name} at {width} px: {problem}" for problem in found]
                shoot_whole_page(page, out / f"{name}-{width}.png", viewport)
            page.close()
        browser.close()
    return problems


def main(folder: str = "docs/screenshots") -> int:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        data_dir = Path(temporary) / "lab-data"
        with running_lab(data_dir, Path(temporary) / "lab.log") as url:
            trace_spec = Path(temporary) / "trace-spec.json"
            trace_spec.write_text(json.dumps(TRACE_SPEC), encoding="utf-8")
            until_decided = ["run", *EXPERIMENT, "--repeats", "2", "--until-decided", "--budget", "15m"]
            commands = (["run", *EXPERIMENT], ["run", "--spec", str(trace_spec)], ["import", IMPORTED], until_decided)
            for command in commands:
                ran = subprocess.run(
                    [sys.executable, "-m", "lab", *command],
                    cwd=PROJECT_ROOT,
                    env=lab_env(data_dir),
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                print(ran.stdout[-3000:], ran.stderr[-2000:], sep="\n")
                if ran.returncode != 0:
                    print(f"`lab {command[0]}` failed ({ran.returncode}); see above")
                    return 1
            problems = photograph(url, out)
    for problem in problems:
        print("PROBLEM:", problem)
    print(f"{len(PAGES) * len(VIEWPORTS)} screenshots in {out}; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
