"""Two or more builds of the Python package, compared in one process: each round runs every
build in turn on the same rows, so a machine whose speed drifts between runs (this one's did, by
up to 2x) slows them alike. Prints each build's best rows/s over the rounds, its ratio to the
first build, and whether its values have the same bits as the first's.

    # a build: the package directory with its compiled library, copied after `maturin develop`
    cp -r python/shapfusion /tmp/builds/before/
    python benchmarks/ab_builds.py /tmp/builds/before /tmp/builds/after [--threads 1] [--rounds 7]

Models: the ones benchmarks/spark.py explains, trained the same way (20 features): XGBoost, 100
trees of depth 6, and a scikit-learn RandomForestClassifier, 100 trees of depth 10. Cases: SHAP
values of a block, interaction values of a block, and one row per call.

Needs the pinned packages of benchmarks/requirements.txt.
"""

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

FEATURES = 20


def load_build(directory: str, index: int):
    """The package in `directory`/shapfusion, imported under a name of its own."""
    package = Path(directory) / "shapfusion"
    if not (package / "__init__.py").is_file():
        sys.exit(f"ab_builds: {package} holds no shapfusion package (copy python/shapfusion there after building)")
    name = f"shapfusion_build_{index}"
    spec = importlib.util.spec_from_file_location(name, package / "__init__.py", submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def models(rows: int):
    import pandas as pd
    import xgboost
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, FEATURES))
    y = (X[:, 0] + np.sin(2 * X[:, 1]) + X[:, 2] * X[:, 3] + 0.3 * rng.normal(size=rows) > 0).astype(int)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(FEATURES)])
    train = min(rows, 50_000)
    forest = RandomForestClassifier(n_estimators=100, max_depth=10, n_jobs=2, random_state=0).fit(frame.iloc[:train], y[:train])
    booster = xgboost.train(
        {"max_depth": 6, "objective": "binary:logistic", "eta": 0.3}, xgboost.DMatrix(frame.iloc[:train], label=y[:train]), 100
    )
    return frame, [("XGBoost 100 x depth 6", booster), ("forest 100 x depth 10", forest)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", help="directories that each hold a built shapfusion package")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()

    import pyarrow as pa

    builds = [load_build(d, i) for i, d in enumerate(args.builds)]
    frame, trained = models(80_000)
    # Rows per case: enough for a tenth of a second or more a call, per model.
    cases = [
        ("SHAP values", {"XGBoost 100 x depth 6": 80_000, "forest 100 x depth 10": 8_000}, "shap_values", 1),
        ("interactions", {"XGBoost 100 x depth 6": 3_000, "forest 100 x depth 10": 300}, "interactions", 1),
        ("one row a call", {"XGBoost 100 x depth 6": 1, "forest 100 x depth 10": 1}, "shap_values", 200),
    ]
    print(f"threads {args.threads}, best of {args.rounds} rounds; builds: {', '.join(args.builds)}")
    for label, model in trained:
        explainers = [b.Explainer(model, threads=args.threads) for b in builds]
        for case, rows_by_model, method, calls in cases:
            rows = rows_by_model[label]
            table = pa.Table.from_pandas(frame.iloc[:rows], preserve_index=False)
            best = [0.0] * len(builds)
            values = [None] * len(builds)
            for _ in range(args.rounds):
                for i, explainer in enumerate(explainers):
                    start = time.perf_counter()
                    for _ in range(calls):
                        values[i] = np.asarray(getattr(explainer, method)(table))
                    best[i] = max(best[i], rows * calls / (time.perf_counter() - start))
            for i, directory in enumerate(args.builds):
                same = np.array_equal(values[i], values[0])
                print(f"{label} | {case} | {directory} | {best[i]:,.0f} rows/s | {best[i] / best[0]:.2f}x | same bits: {same}", flush=True)


if __name__ == "__main__":
    main()
