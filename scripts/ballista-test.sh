#!/usr/bin/env bash
# End-to-end test of distributed SQL on Apache Ballista with Docker: builds the image from local
# artifacts, writes a 1,000,000-row Parquet table in 8 files, starts the compose `ballista`
# profile (scheduler, 3 executors, the Flight SQL gateway `serve --ballista`), checks
# `SELECT id, shap(...)` and a GROUP BY over the attributions against a local `explain`, kills an
# executor mid-query and checks every row still comes back identical (Ballista's task retry),
# then removes everything, also on failure. Bounded by BALLISTA_TIMEOUT seconds.
#
#   scripts/ballista-test.sh           (uses target/debug/shapfusion unless SHAPFUSION_BIN is set,
#                                       and .venv/bin/python with tests/requirements-clients.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${SHAPFUSION_BIN:-target/debug/shapfusion}"
py="${PYTHON:-.venv/bin/python}"
limit="${BALLISTA_TIMEOUT:-900}"
executors="${BALLISTA_EXECUTORS:-3}"
[[ -x "$bin" ]] || cargo build --locked --bin shapfusion
source scripts/compose-lib.sh

export COMPOSE_PROJECT_NAME="shapfusion-ballista-$$"
export SHAPFUSION_BALLISTA_PORT="$(free_port)"
data="$(mktemp -d)"
export SHAPFUSION_DATA="$data"
cleanup() {
  status=$?
  if [[ $status -ne 0 ]]; then compose --profile ballista logs --tail 40 >&2 || true; fi
  compose --profile ballista down -v --remove-orphans >/dev/null 2>&1 || true
  rm -rf "$data"
  exit $status
}
trap cleanup EXIT INT TERM

started=$(date +%s)
deadline=$((started + limit))
scripts/cluster-token.sh
scripts/build-image.sh "$bin" shapfusion:local
echo "writing 1,000,000 rows in 8 Parquet files"
"$py" scripts/ballista_check.py make-data --data "$data" --rows 1000000 --files 8
chmod -R a+rX "$data"
compose --profile ballista config -q
echo "starting the scheduler, $executors executors and the gateway"
compose --profile ballista up -d --scale executor="$executors" scheduler executor gateway

echo "waiting for the scheduler, $executors executors and the gateway to be healthy"
wait_healthy "$deadline" $((executors + 2)) --profile ballista ps -q scheduler executor gateway
echo "healthy after $(( $(date +%s) - started ))s: scheduler + $executors executors + gateway"

victim="$(compose --profile ballista ps -q executor | sed -n 2p)"
timeout --foreground "$(( deadline - $(date +%s) ))" "$py" scripts/ballista_check.py check \
  --server "grpc+tcp://127.0.0.1:${SHAPFUSION_BALLISTA_PORT}" --bin "$bin" --kill "$victim" \
  --token-file "${SHAPFUSION_TOKEN_FILE:-.cluster/token}"
echo "ballista test passed in $(( $(date +%s) - started ))s"
