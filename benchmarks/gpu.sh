#!/usr/bin/env bash
# GPU engine: correctness on every fixture and speed against the CPU engine, on a GPU host; the
# GPU's two kernels side by side (auto: warp kernel, quadrature for paths over 32 elements; and
# every path on the quadrature kernel).
#
#   bash benchmarks/gpu.sh build   # here (Rust toolchain): stripped GPU test + bench binaries in
#                                  # target/gpu-carry/, benchmark models in benchmarks/out/
#   bash benchmarks/gpu.sh         # on the GPU host (no Rust needed): runs both, table last
#
# The binaries link only the engines and the GPU code (--no-default-features --features gpu);
# NVRTC and the CUDA driver are loaded at run time. Results go to stdout and, when $OUT is set,
# to $OUT/gpu_bench.txt. Record them in benchmarks/RESULTS.md (GPU section).
set -euo pipefail
cd "$(dirname "$0")/.."
carry=target/gpu-carry
# The suite's models (benchmarks/suite.py SPECS); GPU_MODELS="a b" picks others. Not large-54f by
# default: 1000 trees of depth 16 take over 15 minutes to train on 2 cores, and its JSON alone is
# larger than what can be carried to a lent GPU host (64 MiB with the binaries: these take 49 MB).
read -r -a models <<< "${GPU_MODELS:-small-8f medium-8f medium-54f medium-128f medium-multiclass}"

if [[ "${1:-run}" == build ]]; then
  # gpu_bench lives in shapfusion-files: its release build is the engines, the GPU code and
  # Parquet only. gpu_paths is an integration test of the root crate, so its build still compiles
  # that crate's dev-dependencies (DataFusion among them) in release.
  cargo build --release --locked -p shapfusion-files --features gpu --example gpu_bench
  features=(--release --locked -p shapfusion --no-default-features --features gpu)
  test_bin=$(cargo test "${features[@]}" --test gpu_paths --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and "gpu_paths" in m["executable"]][0])')
  mkdir -p "$carry"
  cp "${CARGO_TARGET_DIR:-target}/release/examples/gpu_bench" "$test_bin" "$carry/"
  mv "$carry/$(basename "$test_bin")" "$carry/gpu_paths"
  strip "$carry/gpu_bench" "$carry/gpu_paths"
  # The suite's models and rows (needs benchmarks/requirements.txt in .venv).
  for m in "${models[@]}"; do
    .venv/bin/python -c "import sys; sys.path.insert(0, 'benchmarks'); import suite; suite.build_model(next(s for s in suite.SPECS if s.name == '$m'))"
  done
  du -sh "$carry" benchmarks/out/models benchmarks/out/rows
  exit 0
fi

for lib in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$lib" ]] && export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
done
log="${OUT:-$(mktemp -d)}/gpu_bench.txt"
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
