# Helpers for the Docker tests (cluster-test.sh, ballista-test.sh); sourced, not run.

# `docker compose`, or docker-compose v1 where the plugin is missing. Each call is bounded by
# COMPOSE_TIMEOUT seconds (default 300): a stuck engine fails the test with the command named
# instead of holding CI until its own limit.
# Every `timeout` in these scripts runs with --foreground: the command stays in the script's
# process group, so a limit on the whole script (`timeout` around it in .ci/run signals that
# group) stops the command too, and the script's cleanup runs at once instead of after it.
compose() {
  local limit="${COMPOSE_TIMEOUT:-300}" status=0
  if timeout --foreground 30 docker compose version >/dev/null 2>&1; then
    timeout --foreground -k 30 "$limit" docker compose "$@" || status=$?
  else
    timeout --foreground -k 30 "$limit" docker-compose "$@" || status=$?
  fi
  if [[ $status -eq 124 || $status -eq 137 ]]; then
    echo "error: 'compose $*' did not finish in ${limit}s" >&2
  fi
  return "$status"
}

# A free TCP port on this host's loopback.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_healthy DEADLINE COUNT COMPOSE_ARGS...: waits until the COUNT containers that
# `compose COMPOSE_ARGS` lists (a `ps -q` command) report healthy; fails with their logs when one
# keeps restarting or DEADLINE (epoch seconds) passes.
wait_healthy() {
  local deadline="$1" want=" $2 healthy"
  shift 2
  local ids states c
  while :; do
    ids=$(compose "$@")
    states=$(for c in $ids; do timeout --foreground 30 docker inspect --format '{{.State.Health.Status}}' "$c"; done | sort | uniq -c | tr -s ' ')
    [[ "$states" == "$want" ]] && return 0
    for c in $ids; do
      if [[ "$(timeout --foreground 30 docker inspect --format '{{.RestartCount}}' "$c")" != 0 ]]; then
        echo "container $(docker inspect --format '{{.Name}}' "$c") keeps restarting:" >&2
        docker logs --tail 20 "$c" >&2
        return 1
      fi
    done
    if (( $(date +%s) > deadline )); then echo "not healthy in time: $states" >&2; return 1; fi
    sleep 1
  done
}
