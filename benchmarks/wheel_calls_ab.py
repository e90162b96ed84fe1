"""Small calls through the Python wheel, two builds alternated: the latency of
`shapfusion.Explainer.shap_values` on 1 and 4 rows, on one thread and on two, for a small, a
middling and a medium model, each build's run after the other's so that a host whose speed
drifts slows both alike.

    pip wheel --no-deps ./python -w /tmp/wheel-after            # and the other build's, aside
    pip install --no-deps --target /tmp/site-after /tmp/wheel-after/*.whl
    python benchmarks/wheel_calls_ab.py --before /tmp/site-before --after /tmp/site-after

Each build runs in a process of its own (`PYTHONPATH=SITE`); models: `examples/models/fraud.json`
(100 trees of depth 6) on `examples/data/payments.parquet`, and the suite's small-8f and
medium-8f (benchmarks/suite.py trains them, or reuses benchmarks/out/models/) on their rows.
Prints a Markdown table of p50 / p99 microseconds, each build's rounds side by side, or with
`--summary` each build's median over the rounds of p50 (and their range) and of p99, for runs of
many rounds. `--models`, `--threads` and `--sizes` narrow the cases (`--models medium,fraud
--threads 2 --sizes 1,4,16 --rounds 6 --summary`: the calls that run joined on two threads).
Needs numpy and pyarrow beside the wheel (benchmarks/requirements-python.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"

# name: (model file, rows file); the suite's files are made by `suite.build_model`.
MODELS = {
    "fraud (100 trees, depth 6)": (ROOT / "examples/models/fraud.json", ROOT / "examples/data/payments.parquet"),
    "small-8f (10 trees, depth 3)": (OUT / "models/small-8f.json", OUT / "rows/medium-8f.parquet"),
    "medium-8f (100 trees, depth 8)": (OUT / "models/medium-8f.json", OUT / "rows/medium-8f.parquet"),
}
SIZES = (1, 4)
THREADS = (1, 2)


def measure(calls: int, models: list[str], threads_list: list[int], sizes: list[int]) -> dict[str, list[float]]:
    """In this process: p50 and p99 microseconds of each model (whose name starts with one of
    `models`), thread count and size."""
    import numpy as np
    import pyarrow.parquet as pq

    import shapfusion
    from python_wheel import latency_us

    results = {}
    for name, (model, rows) in MODELS.items():
        if not any(name.startswith(m) for m in models):
            continue
        for threads in threads_list:
            explainer = shapfusion.Explainer(str(model), threads=threads)
            table = pq.read_table(rows, columns=explainer.feature_names)
            x = np.column_stack([c.to_numpy(zero_copy_only=False).astype(np.float64) for c in table.columns])
            for size in sizes:
                part = np.ascontiguousarray(x[:size])
                # A tenth as many calls first: the pool's threads started, the caches filled.
                results[f"{name}|{threads}|{size}"] = latency_us(lambda: explainer.shap_values(part), calls, warmup=calls // 10)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, help="site directory holding the first build's wheel")
    ap.add_argument("--after", type=Path, help="site directory holding the second build's wheel")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--calls", type=int, default=3000)
    ints = lambda text: [int(v) for v in text.split(",")]  # noqa: E731
    ap.add_argument("--models", type=lambda text: text.split(","), default=["fraud", "small-8f", "medium-8f"], help="models whose names start with these")
    ap.add_argument("--threads", type=ints, default=list(THREADS), help="thread counts, comma-separated")
    ap.add_argument("--sizes", type=ints, default=list(SIZES), help="rows a call, comma-separated")
    ap.add_argument("--summary", action="store_true", help="each build's median over the rounds instead of every round")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # a build's run, in its own process
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.calls, args.models, args.threads, args.sizes)))
        return
    if not (args.before and args.after):
        ap.error("--before and --after are required")
    missing = [m for m, _ in MODELS.values() if not m.exists()]
    if missing:
        sys.path.insert(0, str(Path(__file__).parent))
        import suite

        for spec in suite.SPECS:
            if spec.name in ("small-8f", "medium-8f"):
                suite.build_model(spec)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for build in ("before", "after"):
            site = getattr(args, build)
            env = {**os.environ, "PYTHONPATH": str(site)}
            cases = ["--models", ",".join(args.models), "--threads", ",".join(map(str, args.threads)), "--sizes", ",".join(map(str, args.sizes))]
            command = [sys.executable, __file__, "--measure", "--calls", str(args.calls), *cases]
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True, cwd=ROOT)
            runs[build].append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.summary:
        median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        print(f"| model | threads | rows | before p50 µs (range) / p99 µs | after p50 µs (range) / p99 µs |  (medians of {args.rounds} rounds)")
        print("|---|---:|---:|---|---|")
        for key in runs["before"][0]:
            model, threads, size = key.split("|")

            def cell(build: str) -> str:
                p50, p99 = [r[key][0] for r in runs[build]], [r[key][1] for r in runs[build]]
                return f"{median(p50):,.0f} ({min(p50):,.0f}-{max(p50):,.0f}) / {median(p99):,.0f}"

            print(f"| {model} | {threads} | {size} | {cell('before')} | {cell('after')} |")
        return
    print("| model | threads | rows | before p50 / p99 µs | after p50 / p99 µs |")
    print("|---|---:|---:|---|---|")
    for key in runs["before"][0]:
        model, threads, size = key.split("|")
        cell = lambda build: ", ".join(f"{r[key][0]:,.0f} / {r[key][1]:,.0f}" for r in runs[build])  # noqa: E731
        print(f"| {model} | {threads} | {size} | {cell('before')} | {cell('after')} |")


if __name__ == "__main__":
    main()
