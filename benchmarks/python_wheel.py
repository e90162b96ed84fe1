"""The Python package in-process against XGBoost 3.4's pred_contribs and shap's TreeExplainer, in
one Python 3.12 process, on the suite's small and medium models; and against the CLI engine's own compute
rows/s (examples/bench) on the same rows, same threads.

    bash benchmarks/run.sh --python [--only medium-8f] [--threads 2]

(run.sh trains the models with benchmarks/suite.py's specs if needed, builds the release wheel
into .venv312 and the release timing harness, then runs this file with .venv312's Python.)
Writes the PYTHON section of benchmarks/RESULTS.md.
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (the machine line of every table)
from suite import OUT, SPECS, write_results_section  # noqa: E402

import shapfusion  # noqa: E402

MEDIUM = [s for s in SPECS if s.name.startswith("medium")]
# 10 trees of depth 3: a call's fixed cost shows in its latency, not the model's compute.
SMALL = next(s for s in SPECS if s.name == "small-8f")


def median_seconds(call, repeats: int) -> float:
    # XGBoost's OpenMP threads spin for a while after a parallel region: let them go to sleep
    # before timing anything else on the same cores.
    time.sleep(1.0)
    call()  # warm-up: first-touch allocations, thread pools
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def latency_us(call, calls: int, warmup: int = 1) -> tuple[float, float]:
    """Median and 99th percentile wall time of one call, in microseconds, after `warmup` calls."""
    time.sleep(1.0)
    for _ in range(warmup):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6, float(np.percentile(times, 99)) * 1e6


def cli_rows_per_s(bench: Path, model: Path, rows_pq: Path, engine: str, threads: int, repeats: int, out: Path) -> tuple[float, np.ndarray]:
    """The CLI engine's compute rows/s (examples/bench: computation only, after set-up), with the
    engine the wheel's `auto` picked (the harness tells `auto` the row count, which may pick
    another)."""
    line = subprocess.run(
        [str(bench), str(model), str(rows_pq), engine, str(threads), str(repeats), "shap", str(out)],
        check=True, capture_output=True, text=True,
    ).stdout.strip().splitlines()[-1]
    result = json.loads(line)
    return result["rows_per_second"], np.fromfile(out, dtype="<f8")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="release examples/bench binary")
    ap.add_argument("--only", default="", help="comma-separated model names (default: small-8f and every medium model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rows", type=int, default=8000, help="rows per call: the suite's rows, repeated (default 8000)")
    ap.add_argument("--shap-rows", type=int, default=200, help="rows for shap's TreeExplainer (one thread, slow)")
    args = ap.parse_args()
    specs = [s for s in [SMALL, *MEDIUM] if not args.only or s.name in args.only.split(",")]
    rows_out = []
    overhead_out = []
    for spec in specs:
        model = OUT / "models" / (spec.name + (".txt" if spec.library == "lightgbm" else ".json"))
        rows_npy = OUT / "rows" / f"{spec.name}.npy"
        if not (model.exists() and rows_npy.exists()):
            sys.exit(f"{model} missing: run `bash benchmarks/run.sh --python` (it trains the suite's models)")
        explainer = shapfusion.Explainer(model, threads=args.threads)
        # The suite's rows repeated to --rows: calls of a second or more, so timer noise and the
        # machine's jitter stay well under the 10 % being checked.
        suite_rows = np.load(rows_npy)
        X = np.ascontiguousarray(np.resize(suite_rows, (max(args.rows, len(suite_rows)), suite_rows.shape[1])))
        n = len(X)
        rows_pq = OUT / "rows" / f"{spec.name}-python-{n}.parquet"
        if not rows_pq.exists():
            import pyarrow as pa
            import pyarrow.parquet as pq
            pq.write_table(pa.table({name: X[:, j] for j, name in enumerate(explainer.feature_names)}), rows_pq)
        wheel_s = median_seconds(lambda: explainer.shap_values(X), args.repeats)
        ours = explainer.shap_values(X)
        cli_rps, cli_values = cli_rows_per_s(Path(args.bench), model, rows_pq, explainer.engine, args.threads, args.repeats, OUT / f"{spec.name}-python-cli.f64")
        if not np.array_equal(ours.ravel(), cli_values):
            sys.exit(f"{spec.name}: the wheel's values differ from the CLI engine's")
        row = {"model": spec.name, "rows": n, "engine": explainer.engine, "wheel": n / wheel_s, "cli": cli_rps}
        scale = np.abs(ours).max()
        if spec.library == "xgboost":
            import xgboost as xgb
            booster = xgb.Booster(model_file=str(model))
            booster.set_param({"nthread": args.threads})
            dmatrix = xgb.DMatrix(X, missing=np.nan)
            row["xgb"] = n / median_seconds(lambda: booster.predict(dmatrix, pred_contribs=True), args.repeats)
            theirs = booster.predict(dmatrix, pred_contribs=True)
            row["xgb_error"] = float(np.abs(theirs.reshape(ours.shape) - ours).max() / scale)
            shap_model = booster
        else:
            import lightgbm as lgb
            shap_model = lgb.Booster(model_file=str(model))
        import shap
        k = min(n, args.shap_rows)
        tree_explainer = shap.TreeExplainer(shap_model)
        row["shap"] = k / median_seconds(lambda: tree_explainer.shap_values(X[:k], check_additivity=False), 1)
        rows_out.append(row)
        print(json.dumps(row), flush=True)

        if spec.library == "xgboost":
            for size in (1, 4, 10, 100):
                part = X[:size]
                calls = 2000 if size <= 10 else 300
                overhead_out.append({
                    "model": spec.name, "rows": size,
                    "wheel_us": latency_us(lambda: explainer.shap_values(part), calls),
                    "xgb_us": latency_us(lambda: booster.predict(xgb.DMatrix(part, missing=np.nan), pred_contribs=True), calls),
                    "shap_us": latency_us(lambda: tree_explainer.shap_values(part, check_additivity=False), calls // 10),
                    "block_us_per_row": 1e6 / row["wheel"],
                })
                print(json.dumps(overhead_out[-1]), flush=True)
    write_report(rows_out, overhead_out, args)


def write_report(rows, overheads, args):
    import xgboost
    import shap
    versions = f"shapfusion {shapfusion.__version__} (release wheel), xgboost {xgboost.__version__}, shap {shap.__version__}, numpy {np.__version__}"
    body = "## Python package (`shapfusion.Explainer`) in-process\n\n"
    body += (
        f"Command: `bash benchmarks/run.sh --python --threads {args.threads}` ({time.strftime('%Y-%m-%d')}). Machine: "
        f"{machine.describe()}; Python {platform.python_version()}. Versions: {versions}.\n"
        f"One Python process: `explainer.shap_values(X)` (X a float64 NumPy array: the suite's rows repeated to {args.rows:,} "
        f"(small-8f: its 20,000), {args.threads} threads), "
        f"`booster.predict(DMatrix(X), pred_contribs=True)` (nthread={args.threads}) and shap's `TreeExplainer` "
        f"(path-dependent, one thread, first {args.shap_rows} rows); median of {args.repeats} after a warm-up. "
        "CLI = the release `examples/bench` harness on the same rows (computation only, after set-up), whose "
        "values the wheel's equal bit for bit.\n\n"
    )
    body += "| model | rows | engine | wheel rows/s | CLI compute rows/s | wheel / CLI | XGBoost 3.4 rows/s | wheel / XGBoost 3.4 | XGBoost 3.4 error | shap rows/s | wheel / shap |\n"
    body += "|---|---|---|---|---|---|---|---|---|---|---|\n"
    for r in rows:
        xgb = f"{r['xgb']:,.0f} | {r['wheel'] / r['xgb']:.2f}× | {r['xgb_error']:.1e}" if "xgb" in r else "— | — | —"
        body += (
            f"| {r['model']} | {r['rows']:,} | {r['engine']} | {r['wheel']:,.0f} | {r['cli']:,.0f} | {r['wheel'] / r['cli']:.3f} | "
            f"{xgb} | {r['shap']:,.0f} | {r['wheel'] / r['shap']:.1f}× |\n"
        )
    body += (
        "\nwheel / CLI sets the whole Python call (reading X into the engines' block, filling the NumPy output) against the engine's compute alone (the harness reads its rows before the clock starts). At small-8f's millions of rows/s that conversion is a quarter of the call; on the medium models it is within the run-to-run noise of this shared 2-core machine: four full runs on 2026-11-24 gave wheel / CLI from 0.89 to 1.07 per model. A ratio far outside that range in the table means the machine's speed changed between the two measurements (they are taken a minute apart), not the wheel: compare within one measurement.\n"
    )
    body += (
        "\nPer-call latency for serving-sized inputs, p50 / p99 (2,000 calls up to 10 rows, 300 for 100 rows; "
        "a tenth as many for shap; XGBoost's includes building the DMatrix, as a server must). On small-8f the "
        "compute is negligible, so its row is the call's fixed cost (Python wrapper, input check, chunk loop, "
        "engine dispatch). On the medium models the compute dominates: `linear` walks a row alone flat "
        "(`crates/core/src/engine/linear/row.rs`), 2 to 4 rows in lane groups of 4 and more in groups of 16, "
        "and a block too small to give every thread rows shares its trees among the threads instead. \"vs block\": the call's p50 per row against the per-row "
        "cost of the large call above.\n\n"
    )
    body += "| model | rows per call | wheel µs p50 / p99 | vs block | XGBoost 3.4 µs p50 / p99 | wheel / XGBoost 3.4 | shap µs p50 |\n|---|---|---|---|---|---|---|\n"
    # What issue 50 (item 1) asks of one row in process, read off the table's one-row rows of the
    # medium models: at most XGBoost 3.4's time for it, and at most 1.5x a row's share of the large call.
    one_row_vs_block, one_row_vs_xgb = [], []
    for o in overheads:
        (w50, w99), (x50, x99), (s50, _) = o["wheel_us"], o["xgb_us"], o["shap_us"]
        vs_block = w50 / o["rows"] / o["block_us_per_row"]
        body += f"| {o['model']} | {o['rows']} | {w50:,.0f} / {w99:,.0f} | {vs_block:.1f}× | {x50:,.0f} / {x99:,.0f} | {w50 / x50:.2f} | {s50:,.0f} |\n"
        if o["rows"] == 1 and o["model"] != "small-8f":
            one_row_vs_block.append(vs_block)
            one_row_vs_xgb.append(w50 / x50)
    if one_row_vs_block:
        worst_vs_block, worst_vs_xgb = max(one_row_vs_block), max(one_row_vs_xgb)
        body += (
            f"\nOne row on the medium models: {min(one_row_vs_block):.1f}-{worst_vs_block:.1f}× a row's share of the large call "
            f"(aimed at: at most 1.5×, {'met' if worst_vs_block <= 1.5 else 'NOT met'}) and "
            f"{min(one_row_vs_xgb):.2f}-{worst_vs_xgb:.2f} of XGBoost 3.4's time for the same row "
            f"(aimed at: at most 1, {'met' if worst_vs_xgb <= 1 else 'NOT met'}).\n"
        )
    write_results_section("PYTHON", body)


if __name__ == "__main__":
    main()
