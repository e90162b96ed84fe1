#!/usr/bin/env bash
# GPU engine: correctness on every fixture and speed against the CPU engine and the peers, on a
# GPU host; the GPU's two kernels side by side (auto: warp kernel, quadrature for paths over 32
# elements; and every path on the quadrature kernel).
#
#   bash benchmarks/gpu.sh build   # here (Rust toolchain, network): target/gpu-carry/, all that
#                                  # the GPU host needs: the stripped GPU test and bench binaries
#                                  # and the models (xz), the rows, the shapfusion wheel (with the
#                                  # GPU engine) and the peers' wheels (XGBoost CPU, WOODELF)
#   GPU_MODELS= bash benchmarks/gpu.sh build   # the binaries only (what CI builds, so the carry
#                                  # cannot break unseen)
#   bash benchmarks/gpu.sh         # on the GPU host (no Rust needed; device tool: carry
#                                  # target/gpu-carry): every step, table last
#
# gpu_bench links only the engines, the GPU code and Parquet (release); gpu_paths is the test
# binary `cargo test` builds (the dev profile, the engines at opt-level 2). NVRTC and the CUDA
# driver are loaded at run time. The binaries and models travel xz-compressed (a third of their
# size) and are unpacked on the host with Python's lzma; the build checks that the carry with the
# working tree stays under what a lent GPU host takes (64 MiB). Each step on the host has a time
# limit of its own, so a step that hangs costs only its share of the lease. Results go to stdout
# and, when $OUT is set, to $OUT/gpu_bench.txt (the whole log), $OUT/gpu_bench.json (gpu_bench:
# kernels, CPU engine, end to end, launch plans), $OUT/gpu_peers.json (the wheel and the peers)
# and $OUT/gpu_memory.csv (the GPU's memory in use, sampled every 200 ms, its peak last).
# Record them in benchmarks/RESULTS.md (GPU section).
set -euo pipefail
cd "$(dirname "$0")/.."
carry=target/gpu-carry
# The suite's models (benchmarks/suite.py SPECS); GPU_MODELS="a b" picks others. Not large-54f:
# 1000 trees of depth 16 take over 15 minutes to train on 2 cores, and its JSON is larger than
# what can be carried to a lent GPU host (64 MiB in all). deep-50f (300 trees of depth 12) last:
# the steps are sized to finish, and a step cut at its limit loses the least there.
read -r -a models <<< "${GPU_MODELS-small-8f medium-8f medium-54f medium-128f medium-multiclass deep-50f}"
# What a lent GPU host takes: the working tree and the carried paths together.
carry_limit=$((64 << 20))

# xz-compresses $1 to $2 (Python's lzma: no xz program needed).
compress() {
  python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.compress(open(sys.argv[1], "rb").read(), preset=6))' "$1" "$2"
}

if [[ "${1:-run}" == build ]]; then
  # The release builds (the bench, the wheel) without the lints that `.ci/run` wraps its dev
  # builds in (RUSTC_WORKSPACE_WRAPPER is part of what cargo keys a crate's build by): so the
  # bench's build and the wheel's, which CI starts before it sets the wrapper, share the engines.
  without_lints=(env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS)
  # gpu_bench lives in shapfusion-files: its release build is the engines, the GPU code and
  # Parquet only, every crate of it shared with the wheel's release build.
  "${without_lints[@]}" cargo build --release --locked -p shapfusion-files --features gpu --example gpu_bench
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
  if [[ -n "${GPU_BASE_KERNEL:-}" ]]; then
    # A kernel source to compare against in the same run (the host's `ab` step): gpu_bench built
    # once more with GPU_BASE_KERNEL in place of kernels/treeshap.cu, which is then put back.
    saved=$(mktemp)
    cp kernels/treeshap.cu "$saved"
    trap 'cp "$saved" kernels/treeshap.cu' EXIT
    cp "$GPU_BASE_KERNEL" kernels/treeshap.cu
    "${without_lints[@]}" cargo build --release --locked -p shapfusion-files --features gpu --example gpu_bench
    cp "${CARGO_TARGET_DIR:-target}/release/examples/gpu_bench" "$carry/gpu_bench_base"
    strip "$carry/gpu_bench_base"
    cp "$saved" kernels/treeshap.cu
    trap - EXIT
  fi
  for b in "$carry"/gpu_*; do
    compress "$b" "$b.xz" && rm "$b"
  done
  if ((${#models[@]} > 0)); then
    # The suite's models and rows (needs benchmarks/requirements.txt in .venv).
    mkdir -p "$carry/models" "$carry/rows" "$carry/wheels"
    for m in "${models[@]}"; do
      .venv/bin/python -c "import sys; sys.path.insert(0, 'benchmarks'); import suite; suite.build_model(next(s for s in suite.SPECS if s.name == '$m'))"
      model=$(ls benchmarks/out/models/"$m".{json,txt} 2>/dev/null | head -1 || true)
      compress "$model" "$carry/models/$(basename "$model").xz"
      cp "benchmarks/out/rows/$m.parquet" "$carry/rows/"
    done
    # The wheel, with the GPU engine (its default features; maturin as pinned in
    # python/requirements-test.txt, in .venv), and the peers' wheels for the host's Python 3.12
    # (XGBoost's CPU build, WOODELF and the treelite it parses models with), as pinned elsewhere.
    "${without_lints[@]}" .venv/bin/maturin build --release --locked --manifest-path python/Cargo.toml --out "$carry/wheels"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$carry/wheels" xgboost-cpu==3.4.1 woodelf-explainer==0.4.8 treelite==4.8.1
  fi
  # The working tree as the device tool copies it (tracked and untracked files git does not
  # ignore), plus the carry.
  tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
  carry_bytes=$(du -sb "$carry" | awk '{print $1}')
  du -sh "$carry" "$carry"/*
  echo "working tree $((tree_bytes >> 20)) MiB + carried $((carry_bytes >> 20)) MiB (limit $((carry_limit >> 20)) MiB)"
  if ((tree_bytes + carry_bytes > carry_limit)); then
    echo "the carry is over what a GPU host takes: fewer or smaller models (GPU_MODELS), or smaller binaries" >&2
    exit 1
  fi
  exit 0
fi

# NVRTC: the toolkit's, else the one a Python package brought (PyTorch's CUDA wheels).
for lib in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$lib" ]] && export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
done
if ! ldconfig -p | grep -q libnvrtc.so && ! compgen -G "/usr/local/cuda/lib64/libnvrtc.so*" >/dev/null; then
  nvrtc=$(timeout 20 find / -xdev -name 'libnvrtc.so*' -not -name '*builtins*' 2>/dev/null | head -1 || true)
  [[ -n "$nvrtc" ]] && export LD_LIBRARY_PATH="$(dirname "$nvrtc"):${LD_LIBRARY_PATH:-}"
fi
out="${OUT:-$(mktemp -d)}"
log="$out/gpu_bench.txt"
bin=$(mktemp -d)
python3 -c 'import lzma, pathlib, sys
for p in pathlib.Path(sys.argv[1]).rglob("*.xz"):
    dest = pathlib.Path(sys.argv[2]) / p.relative_to(sys.argv[1]).with_suffix("")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(lzma.decompress(p.read_bytes()))
    dest.chmod(0o755)' "$carry" "$bin"
# The GPU memory in use while the run goes (its peak is the engine's, the host's other use aside).
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$out/gpu_memory.csv" 2>/dev/null &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true; echo "peak MiB: $(sort -n "$out/gpu_memory.csv" | tail -1)" | tee -a "$out/gpu_memory.csv"' EXIT
specs=()
for m in "${models[@]}"; do
  model=$(ls "$bin"/models/"$m".{json,txt} 2>/dev/null | head -1 || true)
  [[ -n "$model" ]] && specs+=("$m=$model=$carry/rows/$m.parquet")
done
# STEPS picks steps (tests bench ab peers profile sanitize); each has a time limit of its own
# (seconds).
steps=" ${STEPS:-tests bench ab peers profile sanitize} "
# The peers on these models only (each peer's call on each model and output takes seconds).
read -r -a peer_models <<< "${PEER_MODELS-medium-8f medium-54f deep-50f}"
peer_specs=()
for spec in "${specs[@]}"; do
  [[ " ${peer_models[*]} " == *" ${spec%%=*} "* ]] && peer_specs+=("$spec")
done
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv || true
  echo "host: $(python3 benchmarks/machine.py 2>/dev/null || echo unknown)"
  echo "cores: $(nproc); NVRTC: $(ldconfig -p | grep -o 'libnvrtc.so[.0-9]*' | head -1) LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  if [[ $steps == *" tests "* ]]; then
    echo "== GPU tests: every fixture, SHAP and interactions, GPU vs exact engine (1e-9 of max|phi|)"
    SHAPFUSION_REQUIRE_GPU=1 SHAPFUSION_REQUIRE_NVRTC=1 SHAPFUSION_FIXTURES="$PWD/tests/fixtures" \
      timeout "${TESTS_LIMIT:-60}" "$bin/gpu_paths" --test-threads 1 || echo "GPU tests FAILED (exit $?)"
  fi
  if [[ $steps == *" bench "* ]]; then
    echo "== GPU vs CPU engine (gpu_bench)"
    timeout "${BENCH_LIMIT:-160}" "$bin/gpu_bench" --rows "${ROWS:-1000000}" --interaction-rows "${INTERACTION_ROWS:-20000}" \
      --cpu-rows "${CPU_ROWS:-20000}" --cpu-end-to-end-rows "${CPU_E2E_ROWS:-200000}" --seconds "${SECONDS_A_CALL:-0.4}" \
      --repeats "${REPEATS:-3}" "${specs[@]}" || echo "gpu_bench FAILED (exit $?)"
  fi
  if [[ $steps == *" ab "* && -x "$bin/gpu_bench_base" ]]; then
    # The kernel before the change (gpu.sh build with GPU_BASE_KERNEL) on the A/B models, right
    # after the bench of the kernel as it is; its JSON goes to $OUT/base/.
    echo "== A/B: gpu_bench built with the base kernel"
    ab_specs=()
    for spec in "${specs[@]}"; do
      [[ " ${AB_MODELS:-medium-8f medium-54f deep-50f} " == *" ${spec%%=*} "* ]] && ab_specs+=("$spec")
    done
    mkdir -p "$out/base"
    OUT="$out/base" timeout "${AB_LIMIT:-75}" "$bin/gpu_bench_base" --rows "${ROWS:-1000000}" --interaction-rows "${INTERACTION_ROWS:-20000}" \
      --cpu-rows 2000 --cpu-end-to-end-rows 1000 --seconds "${SECONDS_A_CALL:-0.4}" --repeats "${REPEATS:-3}" "${ab_specs[@]}" \
      || echo "gpu_bench (base kernel) FAILED (exit $?)"
  fi
  if [[ $steps == *" peers "* ]]; then
    echo "== the wheel and the peers on the same host (gpu_peers.py)"
    site=$(mktemp -d)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$carry"/wheels/*.whl \
      || echo "installing the carried wheels FAILED"
    PYTHONPATH="$site" timeout "${PEERS_LIMIT:-180}" python3 -u benchmarks/gpu_peers.py --deadline "${PEERS_DEADLINE:-140}" \
      --seconds "${SECONDS_A_CALL:-0.4}" --limit 35 --woodelf-limit 75 --out "$out/gpu_peers.json" "${peer_specs[@]}" \
      || echo "gpu_peers FAILED (exit $?)"
  fi
  if [[ $steps == *" profile "* ]]; then
    # The kernels' resources (registers, spills) and their instruction mix, from nvcc's build of
    # the same source for sm_90.
    nvcc_bin=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1 || true)
    if [[ -n "$nvcc_bin" ]]; then
      echo "== profile: nvcc -arch=sm_90 resources and SASS instruction counts"
      timeout 60 "$nvcc_bin" -arch=sm_90 -cubin -Xptxas -v -o "$bin/treeshap.cubin" kernels/treeshap.cu 2>&1 | grep -E "Compiling|registers|spill|stack" || true
      "$(dirname "$nvcc_bin")/cuobjdump" -sass "$bin/treeshap.cubin" 2>/dev/null | awk -f benchmarks/gpu_sass_ops.awk | sort -k2,2 -k1,1nr || true
    fi
    # Nsight Compute on one full-size launch of a kernel (PROFILE_KERNEL; the row kernel by
    # default; the first launch is gpu_bench's small check call), medium-8f; the clocks as the
    # card has them.
    kernel=${PROFILE_KERNEL:-row_shap_kernel}
    echo "== profile: ncu, $kernel on medium-8f"
    ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
    if [[ -n "$ncu_bin" && ${#specs[@]} -gt 1 ]]; then
      # (Without OUT: this gpu_bench's JSON must not replace the bench step's.)
      env -u OUT timeout "${PROFILE_LIMIT:-50}" "$ncu_bin" --clock-control none -k "$kernel" --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
        --section WarpStateStats --section SchedulerStats \
        "$bin/gpu_bench" --rows 200000 --interaction-rows 1000 --cpu-rows 2000 --cpu-end-to-end-rows 1000 --repeats 1 --seconds 0.2 \
        "${specs[1]}" || echo "profile FAILED (exit $?)"
    else
      echo "no ncu on this host"
    fi
  fi
  if [[ $steps == *" sanitize "* ]]; then
    # compute-sanitizer's memcheck over the GPU tests (every kernel and layout on the fixtures):
    # an access out of bounds or a misaligned one is an error there, where the tests' values
    # could still come out right.
    sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1 || true)
    echo "== sanitize: compute-sanitizer memcheck, GPU tests"
    if [[ -n "$sanitizer" ]]; then
      SHAPFUSION_REQUIRE_GPU=1 SHAPFUSION_FIXTURES="$PWD/tests/fixtures" timeout "${SANITIZE_LIMIT:-60}" \
        "$sanitizer" --tool memcheck --error-exitcode 9 "$bin/gpu_paths" --test-threads 1 the_gpu_engine_matches \
        || echo "sanitize FAILED (exit $?)"
    else
      echo "no compute-sanitizer on this host"
    fi
  fi
} 2>&1 | tee "$log"
