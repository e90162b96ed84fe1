#!/usr/bin/env bash
# End-to-end cluster test with Docker: builds the image from local artifacts, starts the compose
# cluster (coordinator + 3 workers), checks a Flight SQL `SELECT shap(...)` from this host
# against a local `explain`, kills a worker during a longer query and checks every row still
# comes back identical, then removes everything, also on failure. Bounded by CLUSTER_TIMEOUT.
#
#   scripts/cluster-test.sh            (uses target/debug/shapfusion unless SHAPFUSION_BIN is set,
#                                       and .venv/bin/python with tests/requirements-clients.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${SHAPFUSION_BIN:-target/debug/shapfusion}"
py="${PYTHON:-.venv/bin/python}"
limit="${CLUSTER_TIMEOUT:-900}"
[[ -x "$bin" ]] || cargo build --locked --bin shapfusion
source scripts/compose-lib.sh

export COMPOSE_PROJECT_NAME="shapfusion-test-$$"
export SHAPFUSION_PORT="$(free_port)"
cleanup() {
  status=$?
  if [[ $status -ne 0 ]]; then compose logs --tail 30 >&2 || true; fi
  compose down -v --remove-orphans >/dev/null 2>&1 || true
  exit $status
}
trap cleanup EXIT INT TERM

started=$(date +%s)
scripts/cluster-token.sh
scripts/build-image.sh "$bin" shapfusion:local
compose config -q
compose --profile gpu config -q
compose up -d

echo "waiting for the cluster to be healthy"
deadline=$((started + limit))
wait_healthy "$deadline" 4 ps -q
echo "healthy after $(( $(date +%s) - started ))s: coordinator + 3 workers"

timeout --foreground "$(( deadline - $(date +%s) ))" "$py" scripts/cluster_check.py \
  --server "grpc+tcp://127.0.0.1:${SHAPFUSION_PORT}" --bin "$bin" --kill "$(compose ps -q worker2)" \
  --token-file "${SHAPFUSION_TOKEN_FILE:-.cluster/token}"
echo "cluster test passed in $(( $(date +%s) - started ))s"
