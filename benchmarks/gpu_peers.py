#!/usr/bin/env python3
"""The GPU host's peers and the Python wheel, beside `gpu_bench` (run by `benchmarks/gpu.sh`).

    python3 gpu_peers.py [--seconds S] [--deadline S] [--out FILE.json] NAME=MODEL=ROWS.parquet ...

For each model, in the same run and on the same rows:
  * the shapfusion wheel with device="gpu" and device="cpu" (all cores), SHAP values, and
    interaction values on fewer rows; `TreeExplainer(model, device="gpu")` on a few rows;
  * XGBoost's CPU `predict(pred_contribs=True)` (and `pred_interactions`) on all cores;
  * WOODELF on the same GPU (`WoodelfExplainer(model, GPU=True)`, CuPy).
Every method runs in a child process of its own (`one` below), so that a peer that fails, hangs
or takes the GPU's memory cannot stop the others; each is timed on rows sized from a first,
smaller call so that one call takes about S seconds, and its values are checked against the
wheel's CPU values on the first rows. A method not started before the deadline is recorded as
skipped. Prints one line per measurement, a markdown table last, and writes the results as JSON.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import machine  # benchmarks/machine.py, same directory: the host in the JSON
import numpy as np

CHECK_ROWS = 500


def load_rows(path, n):
    import pyarrow.parquet as pq
    table = pq.read_table(path)
    x = np.column_stack([table.column(i).to_numpy(zero_copy_only=False).astype(np.float64) for i in range(table.num_columns)])
    reps = -(-n // len(x))
    return np.ascontiguousarray(np.tile(x, (reps, 1))[:n]), table.column_names


# Each child process's explainer, made once: the calls of a child (the ramp and the timed one)
# reuse it, as a server would hold it (WOODELF parses the model into its own form at the first
# call, and shapfusion's GPU engine uploads it when made).
EXPLAINERS = {}


def explainer_for(method, model):
    if method not in EXPLAINERS:
        if method.startswith("shapfusion"):
            import shapfusion
            if method.endswith("treeexplainer"):
                EXPLAINERS[method] = shapfusion.TreeExplainer(model, device="gpu")
            else:
                EXPLAINERS[method] = shapfusion.Explainer(model, device=method.split("-")[1])
        elif method == "xgboost-cpu":
            import xgboost as xgb
            booster = xgb.Booster(model_file=model)
            booster.set_param({"nthread": os.cpu_count()})
            EXPLAINERS[method] = booster
        elif method == "woodelf-gpu":
            import woodelf
            import xgboost as xgb
            EXPLAINERS[method] = woodelf.WoodelfExplainer(xgb.Booster(model_file=model), GPU=True)
        else:
            raise SystemExit(f"unknown method {method}")
    return EXPLAINERS[method]


def compute(method, kind, model, rows_path, n):
    """Values of `kind` for the first `n` rows, and the seconds the call took (the explainer made
    before the clock starts, the first call's set-up excepted)."""
    x, names = load_rows(rows_path, n)
    explainer = explainer_for(method, model)
    if method == "shapfusion-gpu-treeexplainer":
        start = time.perf_counter()
        v = explainer.shap_values(x) if kind == "shap" else explainer.shap_interaction_values(x)
        return np.asarray(v), time.perf_counter() - start
    if method.startswith("shapfusion"):
        start = time.perf_counter()
        v = explainer.shap_values(x) if kind == "shap" else explainer.interactions(x)
        return np.asarray(v), time.perf_counter() - start
    if method == "xgboost-cpu":
        import xgboost as xgb
        data = xgb.DMatrix(x, missing=np.nan)
        start = time.perf_counter()
        v = explainer.predict(data, pred_contribs=kind == "shap", pred_interactions=kind != "shap")
        return v, time.perf_counter() - start
    import pandas as pd
    frame = pd.DataFrame(x, columns=names)
    start = time.perf_counter()
    v = explainer.shap_values(frame, verbose=False) if kind == "shap" else explainer.shap_interaction_values(frame)
    return np.asarray(v), time.perf_counter() - start


def one(args):
    """Child: a first call on 20 rows (it pays the first-call costs: kernels compiled, the model
    parsed), then calls on 10 times the rows while a call takes under a tenth of S seconds, or
    while the rate still grows by half per step (WOODELF's calls cost seconds whatever the rows)
    and ten times the last call fits the time left; then, where the last call took under S
    seconds, one sized to take about S seconds. Times the last call, saves its first CHECK_ROWS
    rows' values and prints one JSON line."""
    method, kind, model, rows_path, most, seconds = args.method, args.kind, args.model, args.rows, args.most, args.seconds
    started = time.perf_counter()
    n = min(20, most)
    _, first_s = compute(method, kind, model, rows_path, n)
    values, s = compute(method, kind, model, rows_path, n)
    while n < most:
        left = args.budget - (time.perf_counter() - started)
        rate = n / s
        if s * 10 > left:
            break
        bigger = min(most, n * 10)
        bigger_values, bigger_s = compute(method, kind, model, rows_path, bigger)
        grew = bigger / bigger_s > 1.5 * rate
        n, values, s = bigger, bigger_values, bigger_s
        if s > seconds / 10 and not grew:
            break
    if s < seconds and n < most:
        n = int(min(most, n * seconds / max(s, 1e-6)))
        values, s = compute(method, kind, model, rows_path, n)
    np.save(args.values, np.asarray(values[:CHECK_ROWS], dtype=np.float64))
    print(json.dumps({"rows": n, "seconds": s, "rows_per_s": n / s, "first_call_s": first_s}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("specs", nargs="*")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--deadline", type=float, default=240.0, help="no method starts after this many seconds")
    p.add_argument("--limit", type=float, default=90.0, help="seconds one method may take")
    p.add_argument("--woodelf-limit", type=float, default=90.0, help="seconds WOODELF may take (its first call parses the model)")
    p.add_argument("--out", default=None)
    p.add_argument("--one", action="store_true")
    p.add_argument("--method")
    p.add_argument("--kind")
    p.add_argument("--model")
    p.add_argument("--rows")
    p.add_argument("--most", type=int)
    p.add_argument("--values")
    p.add_argument("--budget", type=float, default=30.0)
    args = p.parse_args()
    if args.one:
        return one(args)
    t0 = time.time()
    results = []
    scratch = os.environ.get("TMPDIR", "/tmp")
    # The wheel's CPU values first: the reference of the others.
    plan = [("shap", 1_000_000, ["shapfusion-cpu", "shapfusion-gpu", "xgboost-cpu", "woodelf-gpu", "shapfusion-gpu-treeexplainer"]),
            ("interactions", 20_000, ["shapfusion-cpu", "shapfusion-gpu", "xgboost-cpu", "woodelf-gpu"])]
    for spec in args.specs:
        name, model, rows_path = spec.split("=", 2)
        for kind, most, methods in plan:
            reference = None
            for method in methods:
                row = {"model": name, "kind": kind, "method": method}
                if time.time() - t0 > args.deadline:
                    row["status"] = "skipped: past the deadline"
                    results.append(row)
                    continue
                values = os.path.join(scratch, f"peer-{name}-{kind}-{method}.npy")
                limit = args.woodelf_limit if method.startswith("woodelf") else args.limit
                cmd = [sys.executable, __file__, "--one", "--method", method, "--kind", kind, "--model", model, "--rows", rows_path,
                       "--most", str(most), "--seconds", str(args.seconds), "--values", values, "--budget", str(0.8 * limit)]
                try:
                    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=limit)
                    if done.returncode != 0:
                        row["status"] = "failed: " + (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]
                    else:
                        row.update(json.loads(done.stdout.strip().splitlines()[-1]))
                        row["status"] = "ok"
                        got = np.load(values)
                        if method == "shapfusion-cpu":
                            reference = got
                        if reference is not None:
                            k = min(len(reference), len(got))
                            r, got = reference[:k], got[:k]
                            if method in ("woodelf-gpu", "shapfusion-gpu-treeexplainer"):
                                # shap's layout (WOODELF's too): the features' values, no bias.
                                r = r[..., :-1] if kind == "shap" else r[..., :-1, :-1]
                            r, g = r.reshape(len(got), -1), got.reshape(len(got), -1)
                            if r.shape == g.shape:
                                scale = np.maximum(np.abs(r).max(axis=1), 1e-12)
                                row["max_error_of_max_phi"] = float((np.abs(g - r).max(axis=1) / scale).max())
                            else:
                                row["max_error_of_max_phi"] = f"shapes differ: {g.shape} vs {r.shape}"
                except subprocess.TimeoutExpired:
                    row["status"] = f"timed out after {limit:.0f}s"
                print(json.dumps(row), flush=True)
                results.append(row)
                if args.out:  # after each measurement: a run cut at its limit keeps what it measured
                    with open(args.out, "w") as f:
                        json.dump({"host": machine.describe(), "cpu_count": os.cpu_count(), "results": results}, f, indent=1)
    print("\n| model | output | method | rows | rows/s | first call s | max error vs shapfusion CPU (of max|φ|) | status |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for r in results:
        err = r.get("max_error_of_max_phi", "")
        err = f"{err:.1e}" if isinstance(err, float) else err
        rate = f"{r['rows_per_s']:,.0f}" if "rows_per_s" in r else "–"
        first = f"{r['first_call_s']:.2f}" if "first_call_s" in r else "–"
        print(f"| {r['model']} | {r['kind']} | {r['method']} | {r.get('rows', '–')} | {rate} | {first} | {err} | {r['status']} |")


if __name__ == "__main__":
    main()
