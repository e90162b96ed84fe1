#!/usr/bin/env bash
# Fuzzes the model readers and the readers of rows with libFuzzer on the stable toolchain.
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET ...]     (default: 60 s each; every target)
#   fuzz/run.sh build                                 (build the targets only: CI builds them
#                                                      early, in the background, and fuzzes later)
#
# Targets: xgboost_json, xgboost_ubjson, lightgbm_text, catboost_json, catboost_cbm, shapfusion_json, spark_ml (the
# model readers) and input_rows (the readers of rows to explain). Each starts from the committed files
# (tests/fixtures/**, the crafted corpus, and fuzz/regressions/<target>/) plus what earlier
# runs found, kept in $FUZZ_WORK (default ~/.cache/shapfusion/fuzz). An input that crashes,
# aborts, allocates more than 2 GiB or runs longer than 10 s is saved under
# $FUZZ_WORK/artifacts/<target>/ and the script fails; copy it to fuzz/regressions/<target>/
# once fixed: `cargo test --test crafted_models` replays every model input there, and
# `cargo test -p shapfusion-files` those of input_rows.
set -euo pipefail
cd "$(dirname "$0")"
build_only=0
if [[ "${1:-}" == build ]]; then
  build_only=1
  shift
fi
seconds="${1:-60}"
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(xgboost_json xgboost_ubjson lightgbm_text catboost_json catboost_cbm shapfusion_json spark_ml input_rows)
work="${FUZZ_WORK:-$HOME/.cache/shapfusion/fuzz}"

# What `cargo fuzz build --sanitizer none` passes: coverage counters, comparison tracing and
# the `fuzzing` cfg, with debug assertions and overflow checks on. All stable flags.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
export CARGO_TARGET_DIR="$work/target"
# An explicit --target keeps these flags off build scripts and proc macros, as cargo fuzz does.
host="$(rustc -vV | sed -n 's/^host: //p')"
cargo build --locked --release --bins --target "$host"
[[ $build_only -eq 0 ]] || exit 0
bin_dir="$CARGO_TARGET_DIR/$host/release"

# One target: seeds its corpus, fuzzes it for $seconds, prints a summary; non-zero when libFuzzer
# found a failing input.
fuzz_one() {
  local target="$1" pattern corpus artifacts seed dir data trees
  case "$target" in
    xgboost_json) pattern='*.json' ;;
    xgboost_ubjson) pattern='*.ubj' ;;
    lightgbm_text) pattern='*.txt' ;;
    catboost_json) pattern='*/cb_*/model.json' ;;
    catboost_cbm) pattern='*/cb_*/model.cbm' ;;
    shapfusion_json) pattern='*/skl_*/model.json' ;;
    spark_ml) pattern='' ;;
    input_rows) pattern='*.parquet' ;;
    *) echo "unknown target $target" >&2; exit 2 ;;
  esac
  corpus="$work/corpus/$target"
  artifacts="$work/artifacts/$target"
  mkdir -p "$corpus" "$artifacts" "regressions/$target"
  if [[ -n "$pattern" ]]; then
    # Seeds are named after their path: many fixtures' files share a name (model.json).
    while IFS= read -r seed; do
      cp -n "$seed" "$corpus/$(echo "${seed#../tests/fixtures/}" | tr '/' '_')"
    done < <(find ../tests/fixtures -path "$pattern" -size -2M)
  else
    # Spark ML directories, flattened as the target reads them (fuzz_targets/spark_ml.rs).
    for dir in ../tests/fixtures/spark_*/model; do
      data=("$dir"/data/*.parquet)
      trees=("$dir"/treesMetadata/*.parquet)
      seed="$corpus/$(basename "$(dirname "$dir")")"
      # A pipeline's or tuning model's tree model is in a subdirectory: not this target's layout.
      [[ -e "$seed" || ! -e "${data[0]}" ]] && continue
      {
        head -n 1 "$dir"/metadata/part-*
        stat -c %s "${data[0]}"
        cat "${data[0]}"
        if [[ -e "${trees[0]}" ]]; then cat "${trees[0]}"; fi
      } >"$seed"
    done
  fi
  cp -n regressions/"$target"/* "$corpus/" 2>/dev/null || true
  echo "== $target: $seconds s from $(ls "$corpus" | wc -l) inputs"
  local found=0
  if ! "$bin_dir/$target" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/" 2>"$work/$target.log"; then
    found=1
    echo "$target: libFuzzer found a failing input (saved in $artifacts):"
  fi
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done|#[0-9]+ +DONE)|ERROR|panicked" "$work/$target.log" | tail -n 8 || true
  return "$found"
}

# libFuzzer runs one process on one core: the targets run side by side, one per core
# ($FUZZ_JOBS), each for its full $seconds, and their summaries print in order when all are done.
parallel="${FUZZ_JOBS:-$(nproc)}"
summaries="$(mktemp -d)"
for target in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= parallel )); do sleep 1; done
  ( if fuzz_one "$target" >"$summaries/$target.txt" 2>&1; then echo 0; else echo 1; fi >"$summaries/$target.status" ) &
done
wait
status=0
for target in "${targets[@]}"; do
  cat "$summaries/$target.txt"
  [[ "$(cat "$summaries/$target.status" 2>/dev/null)" == 0 ]] || status=1
done
rm -rf "$summaries"
exit "$status"
