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

compose() {
  if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi
}
export COMPOSE_PROJECT_NAME="shapfusion-test-$$"
export SHAPFUSION_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
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
while :; do
  states=$(for c in $(compose ps -q); do docker inspect --format '{{.State.Health.Status}}' "$c"; done | sort | uniq -c | tr -s ' ')
  [[ "$states" == " 4 healthy" ]] && break
  for c in $(compose ps -q); do
    if [[ "$(docker inspect --format '{{.RestartCount}}' "$c")" != 0 ]]; then
      echo "container $(docker inspect --format '{{.Name}}' "$c") keeps restarting:" >&2
      docker logs --tail 20 "$c" >&2
      exit 1
    fi
  done
  if (( $(date +%s) > deadline )); then echo "cluster not healthy in time: $states" >&2; exit 1; fi
  sleep 1
done
echo "healthy after $(( $(date +%s) - started ))s: coordinator + 3 workers"

timeout "$(( deadline - $(date +%s) ))" "$py" scripts/cluster_check.py \
  --server "grpc+tcp://127.0.0.1:${SHAPFUSION_PORT}" --bin "$bin" --kill "$(compose ps -q worker2)" \
  --token-file "${SHAPFUSION_TOKEN_FILE:-.cluster/token}"
echo "cluster test passed in $(( $(date +%s) - started ))s"
