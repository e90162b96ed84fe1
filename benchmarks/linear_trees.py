#!/usr/bin/env python3
"""LightGBM linear trees over a background: shapfusion's two engines, and the one exact way a user
has without it, on the same rows, background and threads.

    .venv/bin/python benchmarks/linear_trees.py --bench target/release/examples/bench
        [--features 10] [--trees 100] [--leaves 31] [--backgrounds 100 1000] [--rows 500]
        [--peer-rows 10] [--threads 2] [--write]

Neither LightGBM (`pred_contrib` refuses linear trees) nor shap's TreeExplainer (it cannot read
them) explains these models. What is left is the definition itself: shap's `Exact` explainer over
the model's raw score with `shap.maskers.Independent(bg, max_samples=len(bg))`, which scores every
coalition of the features against every background row through LightGBM's `predict` (2^F x
background rows a row). The model: a LightGBM regressor with `linear_tree=True` on `--features`
features, `--trees` trees of `--leaves` leaves. Measured, for each background size:

* shapfusion: `crates/files/examples/bench.rs ... ALGORITHM THREADS REPEATS shap --background`
  (the release harness) with `auto` (each leaf's background rows grouped once) and `treeshap`
  (the reference walk, row pair by row pair), rows/s over the median of 3 calls on `--rows`
  rows, set-up left out and reported beside, and the largest difference between the two;
* shap's `Exact`, on the first background size only: one call on the first `--peer-rows` rows,
  LightGBM's `num_threads` set to `--threads`, rows/s over its wall time, and the largest
  difference from `auto` on those rows, relative to the row's largest |value|.

`--write` puts the table between the LINEAR TREES markers of RESULTS.md; out/linear_trees.json
always.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import machine  # noqa: E402  (the machine line of every table)
from interventional import rate, rel_error, shapfusion, write_parquet, write_results_block  # noqa: E402

OUT = HERE / "out"


def train(features: int, trees: int, leaves: int, seed: int = 7):
    import lightgbm as lgb

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(20_000, features))
    y = X @ rng.normal(size=features) + np.sin(3 * X[:, 0]) * X[:, 1] + np.where(X[:, 2] > 0, X[:, 3], -X[:, 4])
    y += rng.normal(scale=0.1, size=len(y))
    params = {"objective": "regression", "linear_tree": True, "num_leaves": leaves, "learning_rate": 0.1,
              "verbose": -1, "seed": seed, "deterministic": True}
    booster = lgb.train(params, lgb.Dataset(X, y, feature_name=[f"f{i}" for i in range(features)]), num_boost_round=trees)
    return booster, rng


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.environ.get("SHAPFUSION_BENCH", ""))
    ap.add_argument("--features", type=int, default=10)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--leaves", type=int, default=31)
    ap.add_argument("--backgrounds", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--rows", type=int, default=500)
    ap.add_argument("--peer-rows", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if not args.bench:
        raise SystemExit("--bench PATH (the release build of crates/files/examples/bench.rs) is required")
    import lightgbm as lgb
    import shap

    work = OUT / "linear_trees"
    work.mkdir(parents=True, exist_ok=True)
    booster, rng = train(args.features, args.trees, args.leaves)
    model_path = work / "model.txt"
    booster.save_model(str(model_path))
    X = rng.normal(size=(args.rows, args.features))
    write_parquet(work / "rows.parquet", X)

    def score(rows: np.ndarray) -> np.ndarray:
        return booster.predict(rows, raw_score=True, num_threads=args.threads)

    sizes = []
    for n in args.backgrounds:
        bg = rng.normal(size=(n, args.features))
        write_parquet(work / f"bg{n}.parquet", bg)
        engines = {}
        for algorithm in ("auto", "treeshap"):
            out = work / f"{algorithm}{n}.f64"
            run = shapfusion(args.bench, model_path, work / "rows.parquet", work / f"bg{n}.parquet", algorithm, args.threads, out)
            engines[algorithm] = (run, np.fromfile(out).reshape(args.rows, -1))
        (auto, values), (reference, reference_values) = engines["auto"], engines["treeshap"]
        size = {
            "background": n, "auto_rows_per_second": auto["rows_per_second"], "auto_setup_seconds": auto["setup_seconds"],
            "auto_rss_mib": auto["rss_mib"], "auto_engine_bytes": auto.get("engine_bytes"),
            "reference_rows_per_second": reference["rows_per_second"], "reference_rss_mib": reference["rss_mib"],
            "auto_against_reference": rel_error(values, reference_values),
            "additivity": float(np.abs(values.sum(axis=1) - score(X)).max()),
        }
        if not sizes:
            peer_rows = X[: args.peer_rows]
            explainer = shap.explainers.Exact(score, shap.maskers.Independent(bg, max_samples=len(bg)))
            start = time.perf_counter()
            peer = explainer(peer_rows)
            size["peer_rows_per_second"] = args.peer_rows / (time.perf_counter() - start)
            peer_values = np.hstack([peer.values, np.atleast_1d(peer.base_values).reshape(len(peer_rows), -1)])
            size["error_against_peer"] = rel_error(values[: args.peer_rows], peer_values)
        print(json.dumps(size), flush=True)
        sizes.append(size)
    result = {
        "features": args.features, "trees": args.trees, "leaves": args.leaves, "threads": args.threads, "rows": args.rows,
        "peer_rows": args.peer_rows, "sizes": sizes,
        "versions": {"lightgbm": lgb.__version__, "shap": shap.__version__, "numpy": np.__version__},
    }
    print(json.dumps(result), flush=True)
    (OUT / "linear_trees.json").write_text(json.dumps(result, indent=1))
    if args.write:
        write_results(result, " ".join(sys.argv[1:]))


def write_results(r: dict, argv: str) -> None:
    first = r["sizes"][0]
    lines = [
        f"Command: `python benchmarks/linear_trees.py {argv}` (release harness). Machine: "
        f"{machine.describe()}; {date.today().isoformat()}; LightGBM {r['versions']['lightgbm']}, "
        f"shap {r['versions']['shap']}. A LightGBM regressor with `linear_tree=True`: {r['features']} features, "
        f"{r['trees']} trees of {r['leaves']} leaves; {r['rows']:,} rows explained ({r['peer_rows']} by shap); {r['threads']} threads.",
        "",
        "| background rows | shapfusion `auto` (groups), rows/s | set-up | groups' memory | `treeshap` (row pairs), rows/s "
        "| auto / treeshap | shap `Exact`, rows/s | auto / shap |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in r["sizes"]:
        auto, peer, memory = s["auto_rows_per_second"], s.get("peer_rows_per_second"), s["auto_engine_bytes"]
        memory_text = "" if memory is None else f"{memory / 2**20:.1f} MiB"
        peer_text = ("", "") if peer is None else (rate(peer), f"{auto / peer:,.0f}x")
        lines.append(
            f"| {s['background']:,} | {rate(auto)} | {s['auto_setup_seconds']:.3f} s | {memory_text} "
            f"| {rate(s['reference_rows_per_second'])} | {auto / s['reference_rows_per_second']:.1f}x "
            f"| {peer_text[0]} | {peer_text[1]} |"
        )
    agree = max(s["auto_against_reference"] for s in r["sizes"])
    additivity = max(s["additivity"] for s in r["sizes"])
    lines += [
        "",
        f"* `auto` agrees with shap's `Exact` to {first['error_against_peer']:.1e} of the row's largest |value| and with "
        f"the `treeshap` reference to {agree:.1e}; its rows add up to LightGBM's raw scores within {additivity:.1e}.",
        "* Neither LightGBM's `pred_contrib` nor shap's TreeExplainer explains linear trees at all. `treeshap` walks each "
        "tree once per (row, background row) pair, so its cost grows with the background; `auto` groups each leaf's "
        "background rows by the path features they fail and the terms they are NaN in, so it grows with the groups, "
        "at most 2^(path features + terms) a leaf; shap's `Exact` also doubles with every feature.",
    ]
    write_results_block("<!-- LINEAR TREES BEGIN -->", "<!-- LINEAR TREES END -->",
                        "LightGBM linear trees over a background (benchmarks/linear_trees.py)", lines)


if __name__ == "__main__":
    main()
