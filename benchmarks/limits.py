#!/usr/bin/env python3
"""How far the `linear` engine is from the machine's arithmetic limit, per suite model.

    .venv/bin/python benchmarks/limits.py [--results engines] [--models medium-8f,medium-54f,deep-50f]
        [--bench target/release/examples/bench] [--flops-per-cycle 16] [--ghz GHZ]

For each model it counts the floating-point operations `linear`'s walk does per row (SHAP values),
split by split, as `crates/core/src/engine/linear.rs` does them: per quadrature point and row, a split whose
two children are leaves costs 3 (the sum of A, one fused multiply-add for B), a split that
repeats a feature met above 16 to set its children's factors and terms, a descent into a child
split 3 (its factor and the product for A; 1 when the factor is precomputed), and the ascent
12 (both factors, B, the term and its sum; 8 for a repeated split); a fused multiply-add counts
as 2. The points are those of each tree's longest path (⌈d/2⌉). It reads `linear`'s measured
rows/s on one thread from `benchmarks/out/<results>.json` (the file suite.py writes) and
states the arithmetic rate per core against the core's peak as measured on this host: the
benchmark harness's `--fma-peak` (independent fused multiply-adds on the widest vectors, one
thread, then two at once, which also says what a second core adds to compute-bound code here).
Where the harness cannot measure it (no AVX2), the peak is `--flops-per-cycle` times the clock
(`--ghz`, else /proc/cpuinfo's `cpu MHz`, the nominal clock).

Writes the table between the LIMITS markers of RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import machine  # noqa: E402  (the machine line of every table)
import suite  # noqa: E402  (RESULTS.md's sections)


def walk_flops(model_path: Path) -> tuple[float, int, float]:
    """(flops per row, splits, mean quadrature points per split) of `linear` on an XGBoost JSON model."""
    trees = json.loads(model_path.read_text())["learner"]["gradient_booster"]["model"]["trees"]
    flops = 0.0
    splits = 0
    weighted_points = 0.0
    for tree in trees:
        left, right, feature = tree["left_children"], tree["right_children"], tree["split_indices"]
        # Longest path in distinct features: the tree's points.
        longest = 0
        stack = [(0, frozenset())]
        while stack:
            node, path = stack.pop()
            if left[node] == -1:
                longest = max(longest, len(path))
                continue
            below = path | {feature[node]}
            stack += [(left[node], below), (right[node], below)]
        k = max(1, math.ceil(longest / 2))
        stack = [(0, frozenset())]
        while stack:
            node, path = stack.pop()
            if left[node] == -1:
                continue
            splits += 1
            weighted_points += k
            repeated = feature[node] in path
            children = (left[node], right[node])
            both_leaves = all(left[c] == -1 for c in children)
            if both_leaves and not repeated:
                flops += 3 * k + 8
            else:
                per_point = 16 if repeated else 0
                per_point += sum((1 if repeated else 3) for c in children if left[c] != -1)
                per_point += 8 if repeated else 12
                flops += per_point * k
            below = path | {feature[node]}
            stack += [(c, below) for c in children]
    return flops, splits, weighted_points / max(splits, 1)


def clock_ghz() -> float | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("cpu mhz"):
                return float(line.split(":")[1]) / 1000
    except OSError:
        pass
    return None


def fma_peak(bench: Path, threads: int) -> dict | None:
    """The harness's `--fma-peak THREADS` line (GFLOP/s of each thread), or None where it cannot run."""
    try:
        out = subprocess.run([str(bench), "--fma-peak", str(threads), "3"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default="engines")
    ap.add_argument("--models", default="medium-8f,medium-54f,deep-50f")
    ap.add_argument("--bench", type=Path, default=suite.BENCH)
    ap.add_argument("--flops-per-cycle", type=float, default=16.0)
    ap.add_argument("--ghz", type=float, default=None)
    args = ap.parse_args()
    results = json.loads((HERE / "out" / f"{args.results}.json").read_text())
    one, two = fma_peak(args.bench, 1), fma_peak(args.bench, 2)
    if one and two:
        peak = one["gflops_total"]
        peak_note = (
            f"peak measured here: {peak:.1f} GFLOP/s on one core (`bench --fma-peak 1`: fused multiply-adds on "
            f"{one['vector_doubles'] * 64}-bit vectors); two threads at once: {two['gflops_total']:.1f} GFLOP/s "
            f"together ({two['gflops_total'] / peak:.2f}x one), so compute-bound code gets at most that from a second core here"
        )
    else:
        ghz = args.ghz or clock_ghz()
        if ghz is None:
            sys.exit(f"limits.py: {args.bench} --fma-peak did not run and the clock is unknown: build the harness or give --ghz")
        peak = args.flops_per_cycle * ghz
        peak_note = (
            f"clock {ghz:.2f} GHz (nominal, /proc/cpuinfo), peak taken as {args.flops_per_cycle:g} double-precision "
            "flops per cycle per core (the harness could not measure it)"
        )
    lines = [
        f"Command: `python benchmarks/limits.py --results {args.results} --models {args.models}` "
        f"(operation counts from the model files, rows/s from `benchmarks/out/{args.results}.json`). "
        f"Machine: {machine.describe()}; {peak_note}.",
        "",
        "| model | splits | points per split | flops per row | `linear` rows/s, 1 core | GFLOP/s per core | of peak |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in args.models.split(","):
        rows = [r for r in results if r.get("model") == name and r.get("method") == "shapfusion linear"
                and r.get("kind") == "shap" and r.get("threads") == 1 and r.get("rows_per_s")]
        if not rows:
            continue
        flops, splits, points = walk_flops(HERE / "out" / "models" / f"{name}.json")
        rate = rows[0]["rows_per_s"]
        gflops = flops * rate / 1e9
        lines.append(f"| {name} | {splits:,} | {points:.1f} | {flops / 1e6:.1f} M | {rate:,.0f} | {gflops:.1f} | {gflops / peak:.0%} |")
    lines += [
        "",
        "The rest of the time goes to what the count leaves out: loads and stores of the walk's "
        "stack (A and B for every point, one 64-byte vector per point), the rows' directions at "
        "every split, and the branch per split. The trees stay in cache (a task walks each tree "
        "for all its rows before the next), so memory bandwidth is not the limit for `linear`.",
    ]
    body = "\n".join(lines) + "\n"
    suite.write_results_section("LIMITS", body)
    print(body)


if __name__ == "__main__":
    main()
