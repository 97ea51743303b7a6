#!/usr/bin/env bash
# Proof that the lab installs as a package (pyproject.toml's [project] table) without pulling a
# CUDA torch on a CPU machine, in two steps, each in a fresh virtual environment under a
# temporary folder (nothing of the checkout's .venv is changed):
#   1. resolution from nothing: `pip install -e . --dry-run --ignore-installed --report` lists
#      every wheel a plain install would fetch; none may be an nvidia-* or CUDA wheel, nor torch
#      (the base dependencies need no torch: torch and vLLM are the set-up's, or the extras');
#   2. install beside the set-up's torch and vLLM: a venv that sees .venv's packages (a .pth
#      file), `pip install -e . --no-deps`, then `python -m lab --help` from another folder
#      (so the lab imported is the installed one, not the working directory's).
# Usage: scripts/check_install.sh   (prints "install: ok" or fails)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PYTHON=${PYTHON:-.venv/bin/python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# 1. What a plain install would fetch, resolved from nothing.
"$PYTHON" -m venv "$WORK/resolve"
"$WORK/resolve/bin/pip" install -q --dry-run --ignore-installed --report "$WORK/report.json" -e "$ROOT" \
  >"$WORK/resolve.log" 2>&1 || { cat "$WORK/resolve.log" >&2; exit 1; }
"$PYTHON" - "$WORK/report.json" <<'EOF'
import json, sys
names = sorted(item["metadata"]["name"].lower() for item in json.load(open(sys.argv[1]))["install"])
cuda = [n for n in names if n.startswith("nvidia-") or "cuda" in n or n in ("torch", "triton", "vllm")]
print(f"resolution: {len(names)} wheels, none of them CUDA or torch" if not cuda else f"resolution pulls {cuda}")
sys.exit(1 if cuda or "serving-lab" not in names else 0)
EOF

# 2. Installed beside the set-up's torch and vLLM, then the CLI.
"$PYTHON" -m venv "$WORK/installed"
# The new venv's own setuptools (the one ensurepip bundles) comes before .venv's and cannot build
# an editable wheel: without it, the set-up's (pinned by vLLM) is the build backend.
"$WORK/installed/bin/pip" uninstall -q -y setuptools
site=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$WORK/installed/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
  | xargs -I{} sh -c "echo '$site' > '{}/setup-venv.pth'"
"$WORK/installed/bin/pip" install -q --no-deps --no-build-isolation -e "$ROOT"
(cd "$WORK" && "$WORK/installed/bin/python" -m lab --help >/dev/null)
(cd "$WORK" && "$WORK/installed/bin/python" -c "import lab, torch; print('installed:', lab.__file__, 'torch', torch.__version__)")
echo "install: ok"
