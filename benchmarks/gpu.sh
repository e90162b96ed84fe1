#!/usr/bin/env bash
# GPU engine: correctness on every fixture and speed against the CPU engine, on a GPU host; the
# GPU's two kernels side by side (auto: warp kernel, quadrature for paths over 32 elements; and
# every path on the quadrature kernel).
#
#   bash benchmarks/gpu.sh build   # here (Rust toolchain): stripped GPU test + bench binaries in
#                                  # target/gpu-carry/, benchmark models in benchmarks/out/
#   GPU_MODELS= bash benchmarks/gpu.sh build   # the binaries only (what CI builds, so the carry
#                                  # cannot break unseen)
#   bash benchmarks/gpu.sh         # on the GPU host (no Rust needed): runs both, table last
#
# gpu_bench links only the engines, the GPU code and Parquet (release); gpu_paths is the test
# binary `cargo test` builds (the dev profile, the engines at opt-level 2). NVRTC and the CUDA
# driver are loaded at run time. The build checks that the carry with the working tree stays
# under what a lent GPU host takes (64 MiB). Results go to stdout and, when $OUT is set, to
# $OUT/gpu_bench.txt (the log), $OUT/gpu_bench.json (gpu_bench's results: kernels, CPU engine,
# end to end) and $OUT/gpu_memory.csv (the GPU's memory in use, sampled every 200 ms, and its
# peak on the last line). Record them in benchmarks/RESULTS.md (GPU section).
set -euo pipefail
cd "$(dirname "$0")/.."
carry=target/gpu-carry
# The suite's models (benchmarks/suite.py SPECS); GPU_MODELS="a b" picks others. Not large-54f by
# default: 1000 trees of depth 16 take over 15 minutes to train on 2 cores, and its JSON alone is
# larger than what can be carried to a lent GPU host (64 MiB with the binaries: these take 49 MB).
read -r -a models <<< "${GPU_MODELS-small-8f medium-8f medium-54f medium-128f medium-multiclass}"
# What a lent GPU host takes: the working tree and the carried paths together.
carry_limit=$((64 << 20))

if [[ "${1:-run}" == build ]]; then
  # gpu_bench lives in shapfusion-files: its release build is the engines, the GPU code and
  # Parquet only.
  cargo build --release --locked -p shapfusion-files --features gpu --example gpu_bench
  # gpu_paths: the test binary of `cargo test` (default features, gpu among them; the dev
  # profile, in which the engines are optimised): no build of its own, and a release build would
  # compile the root crate's dev-dependencies (DataFusion among them) once more.
  test_bin=$(cargo test --locked --test gpu_paths --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and "gpu_paths" in m["executable"]][0])')
  rm -rf "$carry"
  mkdir -p "$carry"
  cp "${CARGO_TARGET_DIR:-target}/release/examples/gpu_bench" "$carry/gpu_bench"
  cp "$test_bin" "$carry/gpu_paths"
  strip "$carry/gpu_bench" "$carry/gpu_paths"
  # The suite's models and rows (needs benchmarks/requirements.txt in .venv).
  for m in "${models[@]}"; do
    .venv/bin/python -c "import sys; sys.path.insert(0, 'benchmarks'); import suite; suite.build_model(next(s for s in suite.SPECS if s.name == '$m'))"
  done
  # The working tree as the device tool copies it (tracked and untracked files git does not
  # ignore), plus the carry and the models.
  carried=("$carry")
  [[ ${#models[@]} -eq 0 ]] || carried+=(benchmarks/out/models benchmarks/out/rows)
  tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
  carry_bytes=$(du -sb "${carried[@]}" | awk '{s += $1} END {print s + 0}')
  du -sh "${carried[@]}"
  echo "working tree $((tree_bytes >> 20)) MiB + carried $((carry_bytes >> 20)) MiB (limit $((carry_limit >> 20)) MiB)"
  if ((tree_bytes + carry_bytes > carry_limit)); then
    echo "the carry is over what a GPU host takes: fewer or smaller models (GPU_MODELS), or smaller binaries" >&2
    exit 1
  fi
  exit 0
fi

for lib in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$lib" ]] && export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
done
out="${OUT:-$(mktemp -d)}"
log="$out/gpu_bench.txt"
# The GPU memory in use while the run goes (its peak is the engine's, the host's other use aside).
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$out/gpu_memory.csv" 2>/dev/null &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true; echo "peak MiB: $(sort -n "$out/gpu_memory.csv" | tail -1)" | tee -a "$out/gpu_memory.csv"' EXIT
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv || true
  nproc
  echo "== GPU tests: every fixture, SHAP and interactions, GPU vs exact engine (1e-5 of max|phi|)"
  SHAPFUSION_REQUIRE_GPU=1 SHAPFUSION_REQUIRE_NVRTC=1 SHAPFUSION_FIXTURES="$PWD/tests/fixtures" "$carry/gpu_paths" --test-threads 1
  echo "== GPU vs CPU engine"
  specs=()
  for m in "${models[@]}"; do
    model=$(ls benchmarks/out/models/"$m".{json,txt} 2>/dev/null | head -1 || true)
    [[ -n "$model" ]] && specs+=("$m=$model=benchmarks/out/rows/$m.parquet")
  done
  "$carry/gpu_bench" --rows "${ROWS:-1000000}" --interaction-rows "${INTERACTION_ROWS:-20000}" --cpu-rows "${CPU_ROWS:-20000}" \
    --repeats "${REPEATS:-5}" "${specs[@]}"
} 2>&1 | tee "$log"
