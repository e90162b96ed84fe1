#!/usr/bin/env python3
"""The benchmark suite: builds the models, times every peer and every shapfusion engine on the
same rows in the same run, checks every output against an exact f64 reference, and writes
benchmarks/RESULTS.md (between the SUITE markers) and benchmarks/rows_per_second.png.

Run it through benchmarks/run.sh, which sets up the environments and builds the release binary.

    python benchmarks/suite.py [--quick] [--only MODEL,...] [--threads 2,1] [--skip MODEL/KIND/METHOD,...] [--time-limit S]

Each measurement is a fresh process (so peak memory is per method, read with wait4); times
cover the computation only (not loading), median of the repeats for shapfusion, one timed call
for peers after a warm-up on a few rows. The reference is shapfusion's `treeshap` engine (the
original recursive algorithm in f64, checked in the test suite against brute-force Shapley
values and against XGBoost 3.2 / LightGBM).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import machine  # benchmarks/machine.py, same directory

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
PY311 = ROOT / ".venv" / "bin" / "python"
PY312 = ROOT / ".venv312" / "bin" / "python"
BENCH = ROOT / "target" / "release" / "examples" / "bench"
OURS = ["fast-v1", "fast-v2", "quadrature", "linear", "auto"]


@dataclass
class Spec:
    name: str
    library: str
    features: int
    trees: int
    depth: int
    rows: int          # rows explained
    classes: int = 1
    note: str = ""
    # Interactions on the first N rows only (0: all): the classic peers' pred_interactions run at
    # ~10 rows/s per thread on the medium models, over half an hour for every row.
    interaction_rows: int = 0


SPECS = [
    Spec("small-8f", "xgboost", 8, 10, 3, 20000),
    Spec("medium-8f", "xgboost", 8, 100, 8, 4000, interaction_rows=1000),
    Spec("medium-54f", "xgboost", 54, 100, 8, 2000, interaction_rows=200),
    Spec("medium-128f", "xgboost", 128, 100, 8, 1000),
    Spec("medium-multiclass", "xgboost", 20, 100, 6, 1000, classes=5, note="5 classes: 500 trees", interaction_rows=500),
    Spec("medium-lightgbm", "lightgbm", 54, 100, 8, 2000, note="num_leaves 255, max_depth 8"),
    Spec("deep-50f", "xgboost", 50, 300, 12, 500, interaction_rows=100),
    Spec("large-54f", "xgboost", 54, 1000, 16, 50),
]


def make_data(spec: Spec, n: int, seed: int):
    from sklearn.datasets import make_classification, make_regression
    if spec.classes > 1:
        X, y = make_classification(n_samples=n, n_features=spec.features, n_informative=min(spec.features, 12),
                                   n_classes=spec.classes, n_clusters_per_class=2, random_state=seed)
    else:
        X, y = make_regression(n_samples=n, n_features=spec.features, n_informative=min(spec.features, 16),
                               noise=10.0, random_state=seed)
    rng = np.random.default_rng(seed)
    X[rng.random(X.shape) < 0.02] = np.nan  # a few missing values, as real data has
    return X, y


def build_model(spec: Spec) -> tuple[Path, Path, str]:
    """Trains (or reuses) the model and the rows to explain; returns paths and a training note."""
    model_path = OUT / "models" / (spec.name + (".txt" if spec.library == "lightgbm" else ".json"))
    rows_npy = OUT / "rows" / f"{spec.name}.npy"
    rows_pq = OUT / "rows" / f"{spec.name}.parquet"
    note_path = OUT / "models" / f"{spec.name}.note"
    if model_path.exists() and rows_npy.exists() and rows_pq.exists():
        return model_path, rows_npy, note_path.read_text() if note_path.exists() else ""
    model_path.parent.mkdir(parents=True, exist_ok=True)
    rows_npy.parent.mkdir(parents=True, exist_ok=True)
    train_n = 20000 if spec.depth >= 16 else 10000
    X, y = make_data(spec, train_n, 1)
    Xr, _ = make_data(spec, spec.rows, 2)
    start = time.time()
    if spec.library == "xgboost":
        import xgboost as xgb
        params = {"max_depth": spec.depth, "eta": 0.01, "nthread": 2, "tree_method": "hist", "seed": 0,
                  "objective": "multi:softprob" if spec.classes > 1 else "reg:squarederror"}
        if spec.classes > 1:
            params["num_class"] = spec.classes
        booster = xgb.train(params, xgb.DMatrix(X, y, missing=np.nan), num_boost_round=spec.trees)
        booster.save_model(str(model_path))
    else:
        import lightgbm as lgb
        booster = lgb.train({"objective": "regression", "num_leaves": 255, "max_depth": spec.depth,
                             "learning_rate": 0.01, "num_threads": 2, "verbose": -1, "min_data_in_leaf": 5},
                            lgb.Dataset(X, y), num_boost_round=spec.trees)
        booster.save_model(str(model_path))
    note = f"trained in {time.time() - start:.0f}s on {train_n} rows"
    note_path.write_text(note)
    np.save(rows_npy, Xr)
    import pyarrow as pa
    import pyarrow.parquet as pq
    names = [f"f{i}" for i in range(spec.features)] if spec.library == "xgboost" else [f"Column_{i}" for i in range(spec.features)]
    pq.write_table(pa.table({n: pa.array(Xr[:, i], from_pandas=False) for i, n in enumerate(names)}), rows_pq)
    return model_path, rows_npy, note


# Every measured process is capped, so a method that cannot take a model (FastTreeSHAP v2's
# tables on depth 16, say) is recorded as failed instead of taking the machine down.
TIME_LIMIT_S = 1800
MEMORY_LIMIT_BYTES = 18 << 30


def limit_memory():
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def first_rows(rows_npy: Path, n: int) -> tuple[Path, Path, int]:
    """The first `n` rows of a model's rows, as .npy and .parquet beside them (cached)."""
    npy = rows_npy.with_name(f"{rows_npy.stem}-first{n}.npy")
    pq_path = npy.with_suffix(".parquet")
    if not (npy.exists() and pq_path.exists()):
        import pyarrow.parquet as pq
        np.save(npy, np.load(rows_npy)[:n])
        pq.write_table(pq.read_table(rows_npy.with_suffix(".parquet")).slice(0, n), pq_path)
    return npy, pq_path, n


def run_with_rss(cmd: list[str]) -> tuple[dict | None, float, str]:
    """Runs a command under /usr/bin/time; returns its JSON line, its own peak RSS in MiB and,
    on failure, the last line of its stderr."""
    try:
        proc = subprocess.run(["/usr/bin/time", "-f", "PEAK_RSS_KB %M", *cmd], capture_output=True, text=True, cwd=ROOT,
                              timeout=TIME_LIMIT_S, preexec_fn=limit_memory)
    except subprocess.TimeoutExpired:
        return None, float("nan"), f"not finished within {TIME_LIMIT_S} s"
    rss_lines = [l for l in proc.stderr.splitlines() if l.startswith("PEAK_RSS_KB")]
    rss_mib = int(rss_lines[-1].split()[1]) / 1024.0 if rss_lines else float("nan")
    if proc.returncode != 0:
        errs = [l for l in proc.stderr.splitlines() if l.strip() and not l.startswith(("PEAK_RSS_KB", "Command exited"))]
        if proc.returncode in (-9, 137) or any("MemoryError" in l or "bad_alloc" in l for l in errs):
            return None, rss_mib, f"out of memory (limit {MEMORY_LIMIT_BYTES >> 30} GiB)"
        return None, rss_mib, (errs or ["failed"])[-1][:200]
    line = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    return (json.loads(line[-1]) if line else None), rss_mib, ""


def ours(model: Path, rows_pq: Path, algorithm: str, threads: int, kind: str, out: Path, repeats: int):
    cmd = [str(BENCH), str(model), str(rows_pq), algorithm, str(threads), str(repeats), kind, str(out)]
    res, rss, err = run_with_rss(cmd)
    if res is None:
        return None, rss, err
    values = np.fromfile(out, dtype="<f8")
    return (res, values), rss, ""


def peer(method: str, model: Path, rows_npy: Path, threads: int, kind: str, out: Path, python: Path):
    cmd = [str(python), str(ROOT / "benchmarks" / "peer.py"), method, str(model), str(rows_npy), str(threads), kind, str(out)]
    res, rss, err = run_with_rss(cmd)
    if res is None:
        return None, rss, err
    return (res, np.load(out).ravel()), rss, ""


def rel_error(values: np.ndarray, ref: np.ndarray) -> float:
    if values.shape != ref.shape:
        return float("inf")
    scale = max(np.nanmax(np.abs(ref)), 1e-12)
    diff = np.abs(values - ref)
    if np.isnan(diff).any():
        return float("inf")
    return float(diff.max() / scale)


def is_skipped(patterns: list[str], model: str, kind: str, label: str) -> bool:
    """Whether `--skip` names a method: a shell pattern over `MODEL/KIND/METHOD` matches it."""
    return any(fnmatch.fnmatchcase(f"{model}/{kind}/{label}", p) for p in patterns)


def main():
    global BENCH, TIME_LIMIT_S
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small model only, few rows (smoke run)")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--no-interactions", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="rewrite RESULTS.md from benchmarks/out/results.json")
    ap.add_argument("--methods", default="", help="comma-separated method labels to (re)measure; others are kept from results.json")
    ap.add_argument("--results", default="results", help="results file under benchmarks/out/ (without .json): a partial run kept apart")
    ap.add_argument("--section", default="SUITE", help="the RESULTS.md section the report goes to (SUITE: the whole suite)")
    ap.add_argument("--bench", default=str(BENCH), help="the release timing harness (crates/files/examples/bench.rs)")
    ap.add_argument("--skip", default="", help="comma-separated MODEL/KIND/METHOD patterns (shell globs, e.g. "
                    "'deep-50f/interactions/xgboost 3.2' or '*/interactions/woodelf') not to measure; each gets a row "
                    "that says it was skipped")
    ap.add_argument("--time-limit", type=int, default=TIME_LIMIT_S,
                    help=f"seconds one measured process may run before it is stopped and recorded as not finished "
                         f"(default {TIME_LIMIT_S})")
    args = ap.parse_args()
    BENCH = Path(args.bench)
    TIME_LIMIT_S = args.time_limit
    skip = [p.strip() for p in args.skip.split(",") if p.strip()]
    if args.report_only:
        write_report(json.loads((OUT / f"{args.results}.json").read_text()), args)
        return
    specs = SPECS
    if args.quick:
        specs = [Spec("small-8f", "xgboost", 8, 10, 3, 2000)]
    if args.only:
        specs = [s for s in specs if s.name in args.only.split(",")]
    threads_list = [int(t) for t in args.threads.split(",")]
    results = []
    tmp = OUT / "values"
    tmp.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        model, rows_npy, note = build_model(spec)
        rows_pq = rows_npy.with_suffix(".parquet")
        # Interactions cost O(F²) output per row: measured on the models with at most 20 features
        # and depth 8, and on those that set their own interaction rows.
        wants_interactions = spec.interaction_rows or (spec.depth <= 8 and spec.features <= 20)
        kinds = ["shap"] + ([] if args.no_interactions or not wants_interactions else ["interactions"])
        for kind in kinds:
            kind_npy, kind_pq, kind_rows = rows_npy, rows_pq, spec.rows
            if kind == "interactions" and spec.interaction_rows:
                kind_npy, kind_pq, kind_rows = first_rows(rows_npy, spec.interaction_rows)
            methods = [("shapfusion " + a, "ours", a) for a in OURS]
            if spec.library == "xgboost":
                methods += [("xgboost 3.4", PY312, "xgboost"), ("xgboost 3.2", PY311, "xgboost")]
            else:
                methods += [("lightgbm 4.7", PY311, "lightgbm")] if kind == "shap" else []
            methods += [("shap TreeExplainer", PY311, "shap")]
            if kind == "shap":
                methods += [("fasttreeshap v1", PY311, "fasttreeshap-v1"), ("fasttreeshap v2", PY311, "fasttreeshap-v2")]
            methods += [("woodelf", PY311, "woodelf")]
            if args.methods:
                wanted = args.methods.split(",")
                methods = [m for m in methods if m[0] in wanted]
            if methods and all(is_skipped(skip, spec.name, kind, label) for label, _, _ in methods):
                continue  # nothing of this model and kind to measure: no reference, no table
            ref_out = tmp / f"{spec.name}-{kind}-ref.f64"
            got, _, err = ours(model, kind_pq, "treeshap", max(threads_list), kind, ref_out, 1)
            if got is None:
                print(f"{spec.name}: reference failed: {err}", file=sys.stderr)
                continue
            ref = got[1]
            for label, python, method in methods:
                for threads in threads_list:
                    if method in ("shap", "woodelf") and threads != 1:
                        continue  # single-threaded implementations: measured once, at 1 thread
                    out = tmp / f"{spec.name}-{kind}-{method}-{threads}"
                    row = {"model": spec.name, "kind": kind, "method": label, "threads": threads, "rss_mib": float("nan"),
                           "rows": kind_rows, "ours": python == "ours"}
                    if is_skipped(skip, spec.name, kind, label):
                        # Recorded, so that the table says the method was not measured rather than
                        # leaving it out as if it had never been a peer.
                        row.update(status="skipped (--skip)", rows_per_s=None, error=None)
                        results.append(row)
                        print(f"{spec.name} {kind} {label} x{threads}: skipped", file=sys.stderr, flush=True)
                        continue
                    print(f"{spec.name} {kind} {label} x{threads} ...", file=sys.stderr, flush=True)
                    if python == "ours":
                        got, rss, err = ours(model, kind_pq, method, threads, kind, out.with_suffix(".f64"), 3)
                    else:
                        got, rss, err = peer(method, model, kind_npy, threads, kind, out.with_suffix(".npy"), python)
                    row["rss_mib"] = rss
                    if got is None:
                        row.update(status="failed: " + err, rows_per_s=None, error=None)
                    else:
                        res, values = got
                        seconds = res.get("median_seconds", res.get("seconds"))
                        e = rel_error(values, ref)
                        row.update(rows_per_s=kind_rows / seconds, error=e,
                                   status="ok" if e <= 1e-6 else ("approximate" if e <= 1e-2 else "WRONG"),
                                   engine=res.get("engine"))
                    results.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
        results.append({"model": spec.name, "note": note, "spec": spec.__dict__})
    # Keep earlier results of models not re-run this time, so the suite can run in parts.
    previous = OUT / f"{args.results}.json"
    ran = {s.name for s in specs}
    if previous.exists():
        old = json.loads(previous.read_text())
        if args.methods:
            # Replace only the re-measured methods' rows; keep everything else (notes included).
            # A model the earlier results lack gets this run's note, without which the report
            # would leave its rows out.
            wanted = set(args.methods.split(","))
            noted = {r["model"] for r in old if "note" in r}
            new_rows = [r for r in results if "method" in r or r["model"] not in noted]
            results = [r for r in old if not (r.get("model") in ran and r.get("method") in wanted)] + new_rows
        else:
            results = [r for r in old if r.get("model") not in ran] + results
    previous.write_text(json.dumps(results, indent=1))
    write_report(results, args)


def write_report(results, args):
    lines = []
    command = ("`bash benchmarks/run.sh [--only MODELS]` (it runs `benchmarks/suite.py` with the same "
               "arguments; results of models run in separate parts are merged in `benchmarks/out/results.json`)")
    if args.section != "SUITE":
        command = f"`python benchmarks/suite.py {shlex.join(sys.argv[1:])}` (results in `benchmarks/out/{args.results}.json`)"
    lines.append(f"Command: {command}. "
                 f"Machine: {machine.describe()}; Python {platform.python_version()}.")
    from importlib.metadata import version
    peers = ", ".join(f"{n} {version(n)}" for n in ("xgboost", "lightgbm", "shap", "fasttreeshap-fixed", "woodelf-explainer"))
    xgb34 = subprocess.run([str(PY312), "-c", "import xgboost; print(xgboost.__version__)"], capture_output=True, text=True).stdout.strip() if PY312.exists() else "absent"
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    lines.append(f"Versions: {peers} (Python 3.11); xgboost {xgb34} (Python 3.12); {rustc}, release profile.")
    lines.append("Times are the computation only; rows/s at the given threads; ratio = ours or peer rows/s over the "
                 "fastest correct (not WRONG) peer's at the same thread count; error = max|φ - ref| / max|ref| against shapfusion "
                 "`treeshap` in f64; status `ok` ≤ 1e-6, `approximate` ≤ 1e-2, else `WRONG`. Peak RSS per process.")
    lines.append("")
    order = [s.name for s in SPECS]
    models = sorted([r for r in results if "note" in r], key=lambda r: order.index(r["model"]) if r["model"] in order else -1)
    for m in models:
        spec = m["spec"]
        rows = [r for r in results if r.get("model") == m["model"] and "method" in r]
        for kind in ("shap", "interactions"):
            method_order = ["shapfusion " + a for a in OURS] + ["xgboost 3.4", "xgboost 3.2", "lightgbm 4.7", "shap TreeExplainer",
                                                             "fasttreeshap v1", "fasttreeshap v2", "woodelf"]
            kr = sorted((r for r in rows if r["kind"] == kind),
                        key=lambda r: (method_order.index(r["method"]) if r["method"] in method_order else 99, -r["threads"]))
            if not kr:
                continue
            lines.append(f"### {m['model']} — {kind} ({spec['library']}, {spec['trees']} trees × {spec['classes']} "
                         f"class(es), depth {spec['depth']}, {spec['features']} features, {kr[0].get('rows', spec['rows'])} rows; "
                         f"{m['note']}{'; ' + spec['note'] if spec['note'] else ''})")
            lines.append("")
            lines.append("| method | threads | rows/s | ratio to fastest peer | max rel. error | status | peak RSS MiB |")
            lines.append("|---|---|---|---|---|---|---|")
            for r in kr:
                peers = [p["rows_per_s"] for p in kr if not p["ours"] and p["rows_per_s"] and p["status"] != "WRONG"
                         and p["threads"] in (r["threads"], 1)
                         and (p["threads"] == r["threads"] or p["method"] in ("shap TreeExplainer", "woodelf"))]
                best = max(peers) if peers else None
                rps = r["rows_per_s"]
                ratio = f"{rps / best:.2f}" if rps and best else "–"
                err = "–" if r["error"] is None else f"{r['error']:.1e}"
                name = r["method"] + (f" ({r['engine']})" if r.get("engine") and r["method"].endswith("auto") else "")
                rss = "–" if r["rss_mib"] != r["rss_mib"] else f"{r['rss_mib']:.0f}"  # NaN: not measured
                lines.append(f"| {name} | {r['threads']} | {rps:,.0f} | {ratio} | {err} | {r['status']} | {rss} |"
                             if rps else f"| {name} | {r['threads']} | – | – | – | {r['status']} | {rss} |")
            lines.append("")
    body = "\n".join(lines)
    if args.section == "SUITE":
        plot(results)
        body += "\n![rows per second](rows_per_second.png)\n"
    if args.section == "SUITE":
        write_results_section("SUITE", f"## Peer benchmark suite\n\n{body}\n")
    else:
        write_results_section(args.section, f"{body}\n")
    print(body)


def timed(cmd: list[str]) -> float:
    """Wall time of one whole command run from the repository root (output discarded)."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def write_results_section(tag: str, content: str) -> None:
    """Replaces (or appends) the part of benchmarks/RESULTS.md between `<!-- TAG BEGIN -->` and
    `<!-- TAG END -->`, so each benchmark script owns one section."""
    results_md = ROOT / "benchmarks" / "RESULTS.md"
    text = results_md.read_text() if results_md.exists() else "# Results\n"
    begin, end = f"<!-- {tag} BEGIN -->", f"<!-- {tag} END -->"
    section = f"{begin}\n{content}{end}"
    if begin in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    results_md.write_text(text)


def plot(results):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [r for r in results if r.get("kind") == "shap" and r.get("rows_per_s") and (r["threads"] == 2 or r["method"] in ("shap TreeExplainer", "woodelf"))]
    order = [s.name for s in SPECS]
    models = sorted({r["model"] for r in rows}, key=lambda m: order.index(m) if m in order else -1)
    methods = sorted({r["method"] for r in rows})
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(models)), 5))
    width = 0.8 / max(1, len(methods))
    for i, m in enumerate(methods):
        ys = [next((r["rows_per_s"] for r in rows if r["model"] == mod and r["method"] == m), 0) for mod in models]
        ax.bar([j + i * width for j in range(len(models))], ys, width, label=m)
    ax.set_yscale("log")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(models))])
    ax.set_xticklabels(models, rotation=20)
    ax.set_ylabel("rows / second (2 threads; shap, woodelf 1 thread)")
    ax.set_title("SHAP values: rows per second")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(ROOT / "benchmarks" / "rows_per_second.png", dpi=110)


if __name__ == "__main__":
    main()
