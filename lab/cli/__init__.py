"""The headless CLI: ``python -m lab ...`` runs the same experiments as the web lab.

python -m lab start                       the web lab and its worker (make run)
python -m lab services up [NAME ...]      a backend (naive, vllm, llamacpp...), redis, cache-proxy
python -m lab services status [--json]
python -m lab services down [NAME ...]
python -m lab run --preset NAME [--quick] [--set key=value ...] [--json]
python -m lab runs list [--json] [--limit N]
python -m lab runs export [ID ...] --csv FILE
python -m lab runs slo ID --slo latency_p95_s=10 [--json]   evaluate a stored run against an SLO
python -m lab run --spec FILE [--baseline ID|auto --fail-on-regression FIGURE=PERCENT ...]   a spec file, gated
python -m lab runs spec ID [--output FILE]        a run's (or experiment:ID's) spec file
python -m lab runs baseline ID [--clear]          mark a run or experiment:ID as its configuration's baseline
python -m lab runs baselines [--json]
python -m lab capacity --backend naive --backend vllm --slo latency_p95_s=10 [--by vus|rate] [--quick] [--json]
python -m lab reproduce [--quick] [--repeats N] [--report-only]
python -m lab worker [--name N] [--labels gpu,h100]   a queue worker alone
python -m lab run ... [--requires gpu] [--worker N]   place the runs on a shared queue
"""

from lab.cli.entry import main
from lab.cli.run_commands import print_grid_ratios

__all__ = ["main", "print_grid_ratios"]
