#!/usr/bin/env bash
# One command for the benchmark suite: sets up the Python environments (3.11 for the classic
# peers, 3.12 for XGBoost 3.4), builds the release benchmark binary, runs benchmarks/suite.py.
#   bash benchmarks/run.sh            # full suite (tens of minutes on 2 cores)
#   bash benchmarks/run.sh --quick    # smoke run on the small model
#   bash benchmarks/run.sh --interventional [ARGS]   # interventional SHAP: benchmarks/interventional.py
#   bash benchmarks/run.sh --python [ARGS]           # the Python wheel in-process: benchmarks/python_wheel.py
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then python3.11 -m venv .venv || python3 -m venv .venv; fi
.venv/bin/pip install -q -r benchmarks/requirements.txt
if [ ! -x .venv312/bin/python ]; then
  # The first Python 3.12 that runs (a pyenv shim for python3.12 may exist but refuse to run).
  PY312=""
  for c in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3; do
    if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then PY312="$c"; break; fi
  done
  if [ -n "$PY312" ]; then "$PY312" -m venv .venv312; else echo "no Python 3.12: XGBoost 3.4 will be skipped"; fi
fi
if [ -x .venv312/bin/python ]; then .venv312/bin/pip install -q -r benchmarks/requirements-xgb34.txt; fi
cargo build --release --locked -p shapfusion-files --example bench
if [ "${1:-}" = "--interventional" ]; then
  shift
  bench="${CARGO_TARGET_DIR:-target}/release/examples/bench"
  exec .venv/bin/python benchmarks/interventional.py --bench "$bench" "$@"
fi
if [ "${1:-}" = "--python" ]; then
  shift
  [ -x .venv312/bin/python ] || { echo "the wheel benchmark needs Python 3.12 (XGBoost 3.4 runs in-process with the wheel)" >&2; exit 1; }
  .venv312/bin/pip install -q -r benchmarks/requirements-python.txt
  .venv312/bin/pip install -q ./python   # the release wheel, engines only
  # The suite's small and medium models and rows (trained with the pinned XGBoost 3.2 / LightGBM in .venv).
  .venv/bin/python -c 'import sys; sys.path.insert(0, "benchmarks"); import suite; [suite.build_model(s) for s in suite.SPECS if s.name == "small-8f" or s.name.startswith("medium")]'
  exec .venv312/bin/python benchmarks/python_wheel.py --bench "${CARGO_TARGET_DIR:-target}/release/examples/bench" "$@"
fi
.venv/bin/python benchmarks/suite.py "$@"
