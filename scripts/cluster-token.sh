#!/usr/bin/env bash
# Makes the cluster's bearer token, .cluster/token (32 random bytes, base64), unless it exists.
# docker-compose.yml mounts it into every service; clients send it as 'authorization: Bearer …'.
set -euo pipefail
cd "$(dirname "$0")/.."
file="${SHAPFUSION_TOKEN_FILE:-.cluster/token}"
if [[ ! -s "$file" ]]; then
  mkdir -p "$(dirname "$file")"
  (umask 077; head -c 32 /dev/urandom | base64 | tr -d '\n=' | tr '+/' '-_' > "$file"; echo >> "$file")
  echo "wrote a new cluster token to $file"
fi
