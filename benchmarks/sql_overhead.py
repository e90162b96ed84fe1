#!/usr/bin/env python3
"""`SELECT shap(...)` through `shapfusion sql` vs `shapfusion explain` on the same 1M-row Parquet
file: the overhead of the SQL path. Writes a section of benchmarks/RESULTS.md.

    cargo build --release && python benchmarks/sql_overhead.py [--rows 1000000] [--repeats 3]

Both commands read the same file, explain every row with the example fraud model on all cores,
and write Parquet; the wall time of each whole command is measured (median of the repeats).
"""
import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

import machine  # benchmarks/machine.py, same directory
from suite import timed, write_results_section  # benchmarks/suite.py, same directory

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "shapfusion"
MODEL = ROOT / "examples" / "models" / "fraud.json"
FEATURES = "amount, age, account_days, hour, tx_24h, merchant_risk, country_code, card_present"




def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bin", default=str(BIN), help="the shapfusion binary to time")
    args = ap.parse_args()
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"payments_{args.rows}.parquet"
    if not data.exists():
        subprocess.run([sys.executable, str(ROOT / "examples" / "make_example.py"), "--skip-model",
                        "--rows", str(args.rows), "--out-data", str(data)], check=True)
    explain = [args.bin, "explain", "--model", str(MODEL), "--input", str(data), "--output",
               str(out / "explain.parquet"), "--keep", "id", "--no-progress", "--log", "warn"]
    sql = [args.bin, "sql", "-q", "--model", f"fraud={MODEL}", "-c",
           f"COPY (SELECT id, shap('fraud', {FEATURES}) AS why FROM '{data}') TO '{out / 'sql.parquet'}' STORED AS PARQUET"]
    times = {"explain": [], "sql": []}
    for _ in range(args.repeats):
        times["explain"].append(timed(explain))
        times["sql"].append(timed(sql))
    e, s = statistics.median(times["explain"]), statistics.median(times["sql"])
    overhead = s / e - 1
    body = (
        f"## SQL overhead: `SELECT shap(...)` vs `explain`\n\n"
        f"Command: `.venv/bin/python benchmarks/sql_overhead.py --rows {args.rows} --repeats {args.repeats} --bin {os.path.relpath(args.bin, ROOT)}`. "
        f"Machine: {machine.describe()}. Model `examples/models/fraud.json` (100 trees, depth 6), "
        f"{args.rows:,} rows; both write Parquet; whole-command wall time, median of {args.repeats}.\n\n"
        f"| path | median s | rows/s | runs (s) |\n|---|---|---|---|\n"
        f"| `shapfusion explain` | {e:.2f} | {args.rows / e:,.0f} | {', '.join(f'{t:.2f}' for t in times['explain'])} |\n"
        f"| `shapfusion sql` `COPY (SELECT id, shap(...))` | {s:.2f} | {args.rows / s:,.0f} | {', '.join(f'{t:.2f}' for t in times['sql'])} |\n\n"
        f"Overhead of the SQL path: **{overhead * 100:+.1f} %** (target ≤ 5 %).\n"
    )
    write_results_section("SQL", body)
    print(body)


if __name__ == "__main__":
    main()
