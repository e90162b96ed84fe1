#!/usr/bin/env python3
"""LightGBM linear trees over a background: shapfusion against the one exact way a user has
without it, on the same rows, background and threads.

    .venv/bin/python benchmarks/linear_trees.py --bench target/release/examples/bench
        [--features 10] [--trees 100] [--leaves 31] [--background 100] [--rows 500]
        [--peer-rows 10] [--threads 2] [--write]

Neither LightGBM (`pred_contrib` refuses linear trees) nor shap's TreeExplainer (it cannot read
them) explains these models. What is left is the definition itself: shap's `Exact` explainer over
the model's raw score with `shap.maskers.Independent(bg, max_samples=len(bg))`, which scores every
coalition of the features against every background row through LightGBM's `predict` (2^F x
background rows a row). The model: a LightGBM regressor with `linear_tree=True` on `--features`
features, `--trees` trees of `--leaves` leaves. Measured:

* shapfusion: `crates/files/examples/bench.rs ... auto THREADS REPEATS shap --background`
  (the release harness: `auto` picks the row-pair reference walk for linear leaves), rows/s over
  the median of 3 calls on `--rows` rows, set-up left out and reported beside;
* shap's `Exact`: one call on the first `--peer-rows` rows, LightGBM's `num_threads` set to
  `--threads`, rows/s over its wall time;
* the largest difference between the two on the peer's rows, relative to the row's largest
  |value|.

`--write` puts the table between the LINEAR TREES markers of RESULTS.md; out/linear_trees.json
always.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
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
    ap.add_argument("--background", type=int, default=100)
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
    bg = rng.normal(size=(args.background, args.features))
    write_parquet(work / "rows.parquet", X)
    write_parquet(work / "bg.parquet", bg)

    ours = shapfusion(args.bench, model_path, work / "rows.parquet", work / "bg.parquet", "auto", args.threads, work / "ours.f64")
    values = np.fromfile(work / "ours.f64").reshape(args.rows, -1)

    def score(rows: np.ndarray) -> np.ndarray:
        return booster.predict(rows, raw_score=True, num_threads=args.threads)

    peer_rows = X[: args.peer_rows]
    explainer = shap.explainers.Exact(score, shap.maskers.Independent(bg, max_samples=len(bg)))
    start = time.perf_counter()
    peer = explainer(peer_rows)
    peer_seconds = time.perf_counter() - start
    peer_values = np.hstack([peer.values, np.atleast_1d(peer.base_values).reshape(len(peer_rows), -1)])
    error = rel_error(values[: args.peer_rows], peer_values)
    additivity = float(np.abs(values.sum(axis=1) - score(X)).max())
    result = {
        "features": args.features, "trees": args.trees, "leaves": args.leaves, "background": args.background,
        "threads": args.threads, "rows": args.rows, "ours_rows_per_second": ours["rows_per_second"],
        "ours_setup_seconds": ours["setup_seconds"], "ours_rss_mib": ours["rss_mib"],
        "peer_rows": args.peer_rows, "peer_rows_per_second": args.peer_rows / peer_seconds,
        "error_against_peer": error, "additivity": additivity,
        "versions": {"lightgbm": lgb.__version__, "shap": shap.__version__, "numpy": np.__version__},
    }
    print(json.dumps(result), flush=True)
    (OUT / "linear_trees.json").write_text(json.dumps(result, indent=1))
    if args.write:
        write_results(result, " ".join(sys.argv[1:]))


def write_results(r: dict, argv: str) -> None:
    ratio = r["ours_rows_per_second"] / r["peer_rows_per_second"]
    lines = [
        f"Command: `python benchmarks/linear_trees.py {argv}` (release harness). Machine: {platform.machine()}, "
        f"{platform.platform()}, {os.cpu_count()} cores; {date.today().isoformat()}; LightGBM {r['versions']['lightgbm']}, "
        f"shap {r['versions']['shap']}. A LightGBM regressor with `linear_tree=True`: {r['features']} features, "
        f"{r['trees']} trees of {r['leaves']} leaves; a background of {r['background']} rows; {r['threads']} threads.",
        "",
        "| path | rows | rows/s | shapfusion / it |",
        "|---|---:|---:|---:|",
        f"| shapfusion, `auto` over the background (set-up {r['ours_setup_seconds']:.3f} s, peak RSS {r['ours_rss_mib']:.0f} MiB) "
        f"| {r['rows']:,} | {rate(r['ours_rows_per_second'])} | |",
        f"| shap's `Exact` on LightGBM's raw score (every coalition against every background row) | {r['peer_rows']:,} "
        f"| {rate(r['peer_rows_per_second'])} | {ratio:,.0f}x |",
        "",
        f"* The two agree to {r['error_against_peer']:.1e} of the row's largest |value|; shapfusion's rows add up to "
        f"LightGBM's raw scores within {r['additivity']:.1e}.",
        "* Neither LightGBM's `pred_contrib` nor shap's TreeExplainer explains linear trees at all. shapfusion's cost "
        "per row grows with the background (the reference walk, row pair by row pair); shap's `Exact` also doubles "
        "with every feature.",
    ]
    write_results_block("<!-- LINEAR TREES BEGIN -->", "<!-- LINEAR TREES END -->",
                        "LightGBM linear trees over a background (benchmarks/linear_trees.py)", lines)


if __name__ == "__main__":
    main()
