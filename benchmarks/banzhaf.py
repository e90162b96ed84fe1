#!/usr/bin/env python3
"""Banzhaf values, and interventional interaction values, against WOODELF, the peer that
computes them, on the same rows and threads.

    .venv/bin/python benchmarks/banzhaf.py --bench target/release/examples/bench
        [--rows 2000] [--interaction-rows 500,4000] [--background 1000] [--threads 2] [--write]

The model is a scaled-down copy of WOODELF's README reference task (XGBoost, 100 trees of depth
6, 127 features; the README explains 3,000,000 rows over a 5,000,000-row background, which does
not fit this machine): the same model shape, `--rows` rows explained, `--background` background
rows; the interaction outputs at each `--interaction-rows` size (WOODELF's cost per call is
mostly fixed, a few seconds, so its rows/s grow with the call's rows: the larger size shows
where it stands on big batches). For each output (Banzhaf values and interactions,
path-dependent and over the background, and SHAP interaction values over the background), it
measures:

* shapfusion: `crates/files/examples/bench.rs --index` (the release harness), median
  rows/s over `--repeats` calls (5) in one process, set-up (for the background: its one
  aggregation) left out and reported beside;
* WOODELF 0.4.8 (`WoodelfExplainer(booster[, data=bg]).banzhaf_values(X)`,
  `.banzhaf_interaction_values(X)` or, over the background, `.shap_interaction_values(X)`), in a
  fresh process with NumPy's BLAS and OpenMP threads set
  to `--threads` (it has no thread setting of its own), one call timed with its set-up, as a
  user calls it: the median of `--peer-repeats` such processes (3). Both take a median of several
  because on a virtual machine that hands freed memory back to its host (Linux's free page
  reporting), a call's first touch of its output's pages costs from a tenth to half of its time,
  depending on what ran just before;
* the largest difference between the two, relative to the largest |value| of the row (WOODELF
  keeps the model's float32 thresholds; both are checked against brute force elsewhere:
  `tests/engines.rs`, `crates/core/src/engine/linear.rs`).

`--write` puts the table between the BANZHAF markers of RESULTS.md; out/banzhaf.json always.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import machine  # noqa: E402  (the machine line of every table)
import suite  # noqa: E402  (model training and data)
from interventional import rate, run_measured, write_parquet, write_results_block  # noqa: E402

OUT = HERE / "out"
SPEC = suite.Spec("woodelf-127f", "xgboost", 127, 100, 6, 2000, note="WOODELF's README task, scaled down")
# (name, bench output kind, with a background, WOODELF method, index)
OUTPUTS = [
    ("Banzhaf values, path-dependent", "shap", False, "banzhaf_values", "banzhaf"),
    ("Banzhaf interactions, path-dependent", "interactions", False, "banzhaf_interaction_values", "banzhaf"),
    ("Banzhaf values, interventional", "shap", True, "banzhaf_values", "banzhaf"),
    ("Banzhaf interactions, interventional", "interactions", True, "banzhaf_interaction_values", "banzhaf"),
    ("SHAP interactions, interventional", "interactions", True, "shap_interaction_values", "shapley"),
]


def woodelf_child(method: str, model_path: str, rows_npy: str, bg_npy: str, out_npy: str) -> None:
    """In a fresh process: WOODELF's `method` on the rows (over the background unless `-`)."""
    import pandas as pd
    import xgboost as xgb
    from woodelf.explainer import WoodelfExplainer

    X = np.load(rows_npy)
    names = [f"f{i}" for i in range(X.shape[1])]
    booster = xgb.Booster(model_file=model_path)
    start = time.perf_counter()
    data = None if bg_npy == "-" else pd.DataFrame(np.load(bg_npy), columns=names)
    explainer = WoodelfExplainer(booster, data=data)
    values = getattr(explainer, method)(pd.DataFrame(X, columns=names), verbose=False)
    seconds = time.perf_counter() - start
    np.save(out_npy, np.asarray(values, dtype=np.float64))
    print(json.dumps({"seconds": seconds}))


def ours(bench: str, model: Path, rows_pq: Path, kind: str, bg_pq: Path | None, threads: int, out: Path, index: str, repeats: int) -> dict:
    cmd = [bench, str(model), str(rows_pq), "auto", str(threads), str(repeats), kind, str(out), "--index", index]
    if bg_pq is not None:
        cmd += ["--background", str(bg_pq)]
    stdout, _, rss = run_measured(cmd)
    result = json.loads(stdout.strip().splitlines()[-1])
    result["rss_mib"] = rss
    return result


def difference(ours_values: np.ndarray, theirs: np.ndarray, interactions: bool, diagonal: bool) -> float:
    """max |ours - theirs| / max |theirs| per row, worst row; for interactions off the diagonal
    unless `diagonal` (WOODELF leaves the Banzhaf diagonal empty, and fills Shapley's)."""
    rows, f = theirs.shape[0], theirs.shape[1]
    if interactions:
        mine = ours_values.reshape(rows, f + 1, f + 1)[:, :f, :f]
        keep = np.ones((f, f), dtype=bool) if diagonal else ~np.eye(f, dtype=bool)
        mine, theirs = mine[:, keep], theirs[:, keep]
    else:
        mine = ours_values.reshape(rows, f + 1)[:, :f]
    scale = np.maximum(np.abs(theirs).max(axis=1), 1e-12)
    return float((np.abs(mine - theirs).max(axis=1) / scale).max())


def first_touch_seconds_a_row(width: int, rows: int = 2000, pause: float = 0.0) -> float:
    """Seconds a row to fill a freshly allocated float64 array of `rows` rows of `width`² values
    (the output an interaction call hands back), one thread, each array freed `pause` seconds
    before the next is made: the median of three."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        out = np.empty((rows, width * width))
        out.fill(1.0)
        times.append(time.perf_counter() - start)
        del out
        time.sleep(pause)
    return float(np.median(times)) / rows


def free_page_reporting() -> int | None:
    """The order of the free blocks this (virtual) machine reports to its host, or None where it
    reports none (`page_reporting_order` of Linux's page_reporting module, with a balloon device)."""
    order = Path("/sys/module/page_reporting/parameters/page_reporting_order")
    balloon = Path("/sys/bus/virtio/drivers/virtio_balloon")
    try:
        return int(order.read_text()) if balloon.exists() and any(balloon.glob("virtio*")) else None
    except (OSError, ValueError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.environ.get("SHAPFUSION_BENCH", ""))
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--interaction-rows", default="500,4000", help="rows for the interaction outputs, comma separated: each size is measured")
    ap.add_argument("--background", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5, help="shapfusion's calls per output, in one process (the median counts)")
    ap.add_argument("--peer-repeats", type=int, default=3, help="WOODELF's processes per output, one call each (the median counts)")
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds to wait before each measured process, so that each starts with the memory the one before freed "
                         "already handed back to the host (see free_page_reporting)")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--peer", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer:
        woodelf_child(*args.peer)
        return
    if not args.bench:
        raise SystemExit("--bench PATH (the release build of crates/files/examples/bench.rs) is required")
    work = OUT / "banzhaf"
    work.mkdir(parents=True, exist_ok=True)
    model_path, rows_npy, note = suite.build_model(SPEC)
    sizes = [int(s) for s in args.interaction_rows.split(",")]
    X = np.load(rows_npy)
    most = max([args.rows, *sizes])
    X = np.vstack([X] * -(-most // len(X)))[:most]
    bg, _ = suite.make_data(SPEC, args.background, 3)
    files = {}
    for name, rows in (("rows", X[: args.rows]), *((f"interaction_rows_{n}", X[:n]) for n in sizes), ("bg", bg)):
        np.save(work / f"{name}.npy", rows)
        write_parquet(work / f"{name}.parquet", rows)
        files[name] = work / name
    threads_env = {k: str(args.threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")}
    results = []
    runs = [(o, n) for o in OUTPUTS for n in (sizes if o[1] == "interactions" else [args.rows])]
    for (label, kind, with_bg, method, index), n in runs:
        rows = files[f"interaction_rows_{n}" if kind == "interactions" else "rows"]
        time.sleep(args.settle)
        mine = ours(args.bench, model_path, rows.with_suffix(".parquet"), kind, files["bg"].with_suffix(".parquet") if with_bg else None,
                    args.threads, work / "ours.f64", index, args.repeats)
        peer_out = work / "woodelf.npy"
        cmd = [sys.executable, str(Path(__file__)), "--peer", method, str(model_path), str(rows.with_suffix(".npy")),
               str(files["bg"].with_suffix(".npy")) if with_bg else "-", str(peer_out)]
        peer_seconds = []
        for _ in range(max(args.peer_repeats, 1)):
            time.sleep(args.settle)
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **threads_env})
            if proc.returncode != 0:
                raise SystemExit(f"WOODELF failed on {label}: {proc.stderr.strip().splitlines()[-1]}")
            peer_seconds.append(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])
        theirs_seconds = float(np.median(peer_seconds))
        err = difference(np.fromfile(work / "ours.f64", dtype="<f8"), np.load(peer_out), kind == "interactions", index == "shapley")
        row = {"output": label, "rows": n, "background": args.background if with_bg else None, "threads": args.threads,
               "ours_rows_per_second": mine["rows_per_second"], "ours_setup_seconds": mine["setup_seconds"],
               "woodelf_rows_per_second": n / theirs_seconds, "difference": err}
        row["ratio"] = row["ours_rows_per_second"] / row["woodelf_rows_per_second"]
        print(json.dumps(row), flush=True)
        results.append(row)
    (OUT / "banzhaf.json").write_text(json.dumps(results, indent=1))
    host = machine.describe()
    lines = [
        f"Command: `.venv/bin/python benchmarks/banzhaf.py --bench target/release/examples/bench --rows {args.rows} "
        f"--interaction-rows {args.interaction_rows} --background {args.background} --threads {args.threads} "
        f"--repeats {args.repeats} --peer-repeats {args.peer_repeats} --settle {args.settle:g} --write`, "
        f"{host}, {date.today().isoformat()}. Model: XGBoost, 100 trees of depth 6 on 127 features "
        f"(WOODELF's README task, scaled down to fit this machine: {note}).",
        "",
        "| output | rows | background rows | shapfusion rows/s | set-up s | WOODELF rows/s | vs WOODELF | vs WOODELF incl. set-up | max difference |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        bg_rows = f"{r['background']:,}" if r["background"] else "–"
        whole = r["rows"] / (r["rows"] / r["ours_rows_per_second"] + r["ours_setup_seconds"]) / r["woodelf_rows_per_second"]
        lines.append(f"| {r['output']} | {r['rows']:,} | {bg_rows} | {rate(r['ours_rows_per_second'])} | {r['ours_setup_seconds']:.2f} | "
                     f"{rate(r['woodelf_rows_per_second'])} | {r['ratio']:,.1f}× | {whole:,.1f}× | {r['difference']:.1e} |")
    lines += [
        "",
        f"shapfusion's rows/s are the median of {args.repeats} calls in one process, WOODELF's the median of "
        f"{args.peer_repeats} processes of one call each, each process started {args.settle:g} s after the one before ended. "
        "shapfusion's rows/s leave out its set-up (its column; for a background, the one pass that "
        "aggregates it, and for interactions the tables of pairs); WOODELF's include its own, as one "
        "call of its API does it (`vs WOODELF incl. set-up` counts ours too). Max difference: "
        "max |ours − WOODELF| / max |WOODELF| per row, the worst row (off the diagonal for Banzhaf "
        "interactions, which WOODELF leaves empty; the whole matrix for SHAP interactions).",
        "",
        "WOODELF's time per call is mostly fixed (a few seconds of set-up whatever the rows), so its rows/s "
        "grow with the rows of a call, and the ratios at the larger size are the ones that hold for big "
        "batches. Past them, what a row costs decides; from the two sizes, per row of an interaction output "
        "(wall clock, both on the same threads):",
        "",
        "| output | WOODELF ms a row (marginal) | shapfusion ms a row | ratio |",
        "|---|---:|---:|---:|",
    ]
    for label in dict.fromkeys(r["output"] for r in results if "interactions" in r["output"]):
        pair = sorted((r for r in results if r["output"] == label), key=lambda r: r["rows"])
        if len(pair) < 2:
            continue
        (a, b) = (pair[0], pair[-1])
        theirs = (b["rows"] / b["woodelf_rows_per_second"] - a["rows"] / a["woodelf_rows_per_second"]) / (b["rows"] - a["rows"])
        mine = 1 / b["ours_rows_per_second"]
        lines.append(f"| {label} | {theirs * 1e3:.3f} | {mine * 1e3:.3f} | {theirs / mine:,.1f}× |")
    floor = first_touch_seconds_a_row(SPEC.features + 1)
    fastest_interactions_ms = 1e3 / max((r["ours_rows_per_second"] for r in results if "interactions" in r["output"]), default=float("inf"))
    reporting = free_page_reporting()
    # The settle time between measured processes: long enough for freed memory to be reported
    # to the host (Linux waits 2 s before it reports).
    floor_reported = first_touch_seconds_a_row(SPEC.features + 1, pause=args.settle) if reporting is not None else None
    lines += [
        "",
        "Both tools hand back the dense (F+1)² matrix a row (128 KiB at 127 features; WOODELF builds a "
        "DataFrame of every pair), and writing it is a floor under both: in this run, filling a fresh "
        f"NumPy array of that size took {floor * 1e3:.3f} ms a row on one thread (the kernel zeroing each new "
        "page, then the writes), and in profiles of shapfusion's calls (perf, `examples/bench`) the kernel's "
        "zeroing of the output's pages took from a tenth to half of the time from one run to the next on "
        "this virtual machine; the rest is the walks and the pair sums."
        + (f" This machine reports free memory to its host (Linux's free page reporting, blocks of 2^{reporting} "
           "pages): memory a process frees goes back to the host two seconds later, and a first touch of it then "
           f"waits on the host. Filling the same fresh array with {args.settle:g} s between arrays took {floor_reported * 1e3:.3f} ms "
           f"a row (against {floor * 1e3:.3f} ms one right after the other), where shapfusion's interaction outputs "
           f"above took {fastest_interactions_ms:.3f} ms a row and more in all: a call's time depends on what ran before it."
           if floor_reported is not None else ""),
    ]
    if args.write:
        write_results_block("<!-- BANZHAF BEGIN -->", "<!-- BANZHAF END -->", "Banzhaf values and interventional interactions (against WOODELF)", lines)
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
