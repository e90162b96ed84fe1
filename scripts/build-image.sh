#!/usr/bin/env bash
# Builds the shapfusion image from local artifacts only (no registry needed):
#   [NVRTC_DIR=DIR] [BUILD_TIMEOUT=SECONDS] scripts/build-image.sh [BINARY] [TAG]
# BINARY defaults to target/release/shapfusion, else target/debug/shapfusion (building the
# release one if neither exists); TAG defaults to shapfusion:local.
# The image is labelled with a digest of its files; when TAG already carries that digest nothing
# is built (the cluster and Ballista tests ask for the same image one after the other). A
# `docker build` that has not finished in BUILD_TIMEOUT seconds (default 300) is stopped and
# tried once more; a second timeout fails with the engine's state, rather than waiting on a
# stuck daemon for the rest of CI's time.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-}"
tag="${2:-shapfusion:local}"
if [[ -z "$bin" ]]; then
  if [[ -x target/release/shapfusion ]]; then bin=target/release/shapfusion
  elif [[ -x target/debug/shapfusion ]]; then bin=target/debug/shapfusion
  else cargo build --locked --release --bin shapfusion; bin=target/release/shapfusion; fi
fi
[[ -x "$bin" ]] || { echo "error: no executable at $bin" >&2; exit 1; }

root=docker/rootfs
rm -rf "$root"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$bin" "$root/usr/local/bin/shapfusion"
strip "$root/usr/local/bin/shapfusion" 2>/dev/null || true
# The shared libraries FILE links (libc, libm, libgcc_s, the loader, ...), at the paths it expects.
copy_libs() {
  ldd "$1" | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}
copy_libs "$bin"
# NVRTC for GPU workers (the NVIDIA container toolkit mounts the driver, not NVRTC): from
# NVRTC_DIR, e.g. a CUDA toolkit's lib64 or the nvidia-cuda-nvrtc wheel's nvidia/cu13/lib.
if [[ -n "${NVRTC_DIR:-}" ]]; then
  mkdir -p "$root/usr/local/lib/nvrtc"
  cp -L "$NVRTC_DIR"/libnvrtc*.so* "$root/usr/local/lib/nvrtc/"
  for lib in "$root"/usr/local/lib/nvrtc/*; do copy_libs "$lib"; done  # libstdc++, librt, ...
fi
# CA roots for https object stores; a nobody user for USER 65534.
[[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
echo 'nobody:x:65534:65534:nobody:/:/usr/sbin/nologin' > "$root/etc/passwd"
echo 'nogroup:x:65534:' > "$root/etc/group"

digest="$(cd "$root" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-32)"
label=org.shapfusion.rootfs
size="$(du -sh "$root" | cut -f1)"
if [[ "$(docker image inspect --format "{{index .Config.Labels \"$label\"}}" "$tag" 2>/dev/null)" == "$digest" ]]; then
  echo "$tag is up to date with $bin ($size rootfs, digest $digest)"
  exit 0
fi
limit="${BUILD_TIMEOUT:-300}"
for try in 1 2; do
  status=0
  timeout --foreground -k 30 "$limit" docker build -q --label "$label=$digest" -f Dockerfile -t "$tag" docker >/dev/null || status=$?
  [[ $status -eq 0 ]] && break
  if [[ $status -ne 124 && $status -ne 137 ]]; then
    echo "error: docker build of $tag failed (exit $status)" >&2
    exit "$status"
  fi
  echo "docker build of $tag did not finish in ${limit}s (try $try of 2); the engine:" >&2
  timeout --foreground 30 docker info --format '{{.ServerVersion}} {{.Driver}}, {{.Containers}} containers, {{.Images}} images' >&2 || true
  df -h "$root" >&2 || true
  [[ $try -eq 2 ]] && { echo "error: docker build of $tag timed out twice" >&2; exit 1; }
done
echo "built $tag from $bin ($size rootfs, digest $digest)"
