#!/usr/bin/env python3
"""The Flight path's overhead: `explain --workers` on 1 and 2 loopback workers vs `explain`
in-process, same rows, same binary, same total cores. Writes the POOL section of
benchmarks/RESULTS.md.

    python benchmarks/pool_overhead.py [--spec medium-54f] [--rows 20000] [--repeats 3] [--bin target/release/shapfusion]

The model is the suite's medium model (100 trees, depth 8; benchmarks/suite.py trains it on
first use). In-process runs with all cores; "1 worker" is one worker with all cores; "2 workers"
are two workers sharing the cores (one thread each on a 2-core machine). Each figure is the
whole `explain` command's wall time (read Parquet, explain, write Parquet), median of the repeats;
workers are started once per configuration and are warm (the model loaded) before timing.
"""
import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path


import machine  # benchmarks/machine.py, same directory
from suite import OUT, SPECS, build_model, make_data, timed, write_results_section

ROOT = Path(__file__).resolve().parent.parent


def start_worker(binary, threads):
    proc = subprocess.Popen([binary, "worker", "--listen", "127.0.0.1:0", "--threads", str(threads), "--device", "cpu", "--log", "warn"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"worker did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[1]




def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--spec", default="medium-54f")
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "shapfusion"))
    args = ap.parse_args()
    spec = next(s for s in SPECS if s.name == args.spec)
    model, _, _ = build_model(spec)
    data = OUT / "rows" / f"{spec.name}-{args.rows}.parquet"
    if not data.exists():
        import pyarrow as pa
        import pyarrow.parquet as pq
        X, _ = make_data(spec, args.rows, 3)
        names = [f"f{i}" for i in range(spec.features)] if spec.library == "xgboost" else [f"Column_{i}" for i in range(spec.features)]
        pq.write_table(pa.table({n: pa.array(X[:, i]) for i, n in enumerate(names)}), data)
    cores = os.cpu_count() or 2
    base = [args.bin, "explain", "--model", str(model), "--input", str(data), "--no-progress", "--log", "warn"]

    configs = [("in-process", None, 0), ("pool, 1 worker", 1, cores), ("pool, 2 workers", 2, max(1, cores // 2))]
    times = {}
    for name, n_workers, threads in configs:
        procs = []
        try:
            cmd = base + ["--output", str(OUT / "pool_out.parquet")]
            if n_workers:
                started = [start_worker(args.bin, threads) for _ in range(n_workers)]
                procs = [p for p, _ in started]
                cmd += ["--workers", ",".join(u for _, u in started)]
            timed(cmd)  # warm-up: loads the model on every worker
            times[name] = [timed(cmd) for _ in range(args.repeats)]
        finally:
            for p in procs:
                p.kill()
                p.wait()
        print(name, times[name], flush=True)

    local = statistics.median(times["in-process"])
    rows = [f"| {name} | {statistics.median(t):.2f} | {args.rows / statistics.median(t):,.0f} | "
            f"{(statistics.median(t) / local - 1) * 100:+.1f} % | {', '.join(f'{x:.2f}' for x in t)} |" for name, t in times.items()]
    body = (
        "## Flight pool overhead: `explain --workers` vs in-process\n\n"
        f"Command: `python benchmarks/pool_overhead.py --spec {args.spec} --rows {args.rows} --repeats {args.repeats} --bin {os.path.relpath(args.bin, ROOT)}`. "
        f"Machine: {machine.describe()}; workers on loopback, all processes on the same cores. "
        f"Model `{spec.name}` ({spec.trees} trees, depth {spec.depth}, {spec.features} features), {args.rows:,} rows; "
        f"whole-command wall time, median of {args.repeats} after a warm-up.\n\n"
        "| path | median s | rows/s | vs in-process | runs (s) |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        "Target: the Flight path within 10 % of in-process time.\n"
    )
    write_results_section("POOL", body)
    print(body)


if __name__ == "__main__":
    sys.exit(main())
