#!/usr/bin/env bash
# Makes the cluster's bearer token, .cluster/token (32 random bytes, base64url), unless it exists.
# docker-compose.yml mounts it into every service; clients send it as 'authorization: Bearer …'.
# The containers run as an unprivileged user (65534), so the file itself is world-readable; the
# folder holding it is private (0700), which keeps other users of this host out.
set -euo pipefail
cd "$(dirname "$0")/.."
file="${SHAPFUSION_TOKEN_FILE:-.cluster/token}"
dir="$(dirname "$file")"
mkdir -p "$dir"
if [[ "$dir" == ".cluster" ]]; then chmod 700 "$dir"; fi
if [[ ! -s "$file" ]]; then
  head -c 32 /dev/urandom | base64 | tr -d '\n=' | tr '+/' '-_' > "$file"
  echo >> "$file"
  chmod 644 "$file"
  echo "wrote a new cluster token to $file"
elif [[ "$dir" == ".cluster" ]]; then
  chmod 644 "$file"
fi
