"""One row against a block, two builds of the release timing harness alternated: the engine's
cost of a lone row (an online request) for each model, on 1 and 2 threads, beside a row's share
of the model's whole block, each build's run after the other's so that a host whose speed drifts
slows both alike.

    cargo build --release -p shapfusion-files --example bench   # once per build, copied aside
    python benchmarks/one_row_ab.py --before /tmp/bench-before --after target/release/examples/bench

Models: the suite's (benchmarks/suite.py trains them, or reuses benchmarks/out/models/); the row
is the first of the suite's rows for the model. Prints a Markdown table: the best time of each
run of REPEATS calls of one row, the ratio of the builds' best, and one row against a row of the
block (the after build's, whose bits are the same). Needs benchmarks/requirements.txt.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
import suite  # noqa: E402

DEFAULT_MODELS = "medium-8f,medium-54f,medium-128f,medium-multiclass,medium-lightgbm,deep-50f"


def rows_files(spec, directory: Path) -> tuple[Path, Path, Path]:
    """The model, and its first row and all its rows as Parquet, named as the model expects."""
    model, rows, _ = suite.build_model(spec)
    x = np.load(rows)
    names = [f"Column_{i}" if spec.library == "lightgbm" else f"f{i}" for i in range(x.shape[1])]
    table = pa.table({name: x[:, i] for i, name in enumerate(names)})
    one, block = directory / f"{spec.name}-1.parquet", directory / f"{spec.name}-all.parquet"
    pq.write_table(table.slice(0, 1), one)
    pq.write_table(table, block)
    return model, one, block


def best_us(bench: str, model: Path, rows: Path, threads: int, repeats: int) -> tuple[float, int]:
    out = subprocess.run([bench, str(model), str(rows), "linear", str(threads), str(repeats), "shap"],
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    return result["best_seconds"] * 1e6, result["rows"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the release timing harness of the build before")
    ap.add_argument("--after", required=True, help="the release timing harness of the build after")
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--rounds", type=int, default=2, help="runs of each build, alternated")
    ap.add_argument("--repeats", type=int, default=1000, help="calls of one row a run (a tenth for deep-50f)")
    args = ap.parse_args()
    specs = {s.name: s for s in suite.SPECS}
    lines = ["| model | threads | one row, before (µs, best of each run) | one row, after | before / after "
             "| a row of the block (µs) | one row / a block's row, before → after |", "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            spec = specs[name]
            model, one, block = rows_files(spec, Path(tmp))
            repeats = args.repeats // 10 if spec.depth > 8 else args.repeats
            for threads in (1, 2):
                times = {"before": [], "after": []}
                for _ in range(args.rounds):
                    for build in ("before", "after"):
                        times[build].append(best_us(getattr(args, build), model, one, threads, repeats)[0])
                total, rows = best_us(args.after, model, block, threads, 3)
                per_row = total / rows
                b, a = min(times["before"]), min(times["after"])
                lines.append(f"| {name} | {threads} | {', '.join(f'{t:.0f}' for t in times['before'])} | "
                             f"{', '.join(f'{t:.0f}' for t in times['after'])} | {b / a:.2f}x | {per_row:.1f} | "
                             f"{b / per_row:.1f}x → {a / per_row:.1f}x |")
                print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
