"""scikit-learn and CatBoost models: shapfusion against the tools their users run today, on the
same models, rows and threads.

* scikit-learn (RandomForestClassifier, GradientBoostingRegressor, HistGradientBoostingClassifier):
  shap's ``TreeExplainer`` (path-dependent; shap computes scikit-learn's values itself, with its
  C++ extension) against ``shapfusion.Explainer(estimator)``.
* CatBoost: its own ``get_feature_importance(type="ShapValues", thread_count=T)`` against
  ``shapfusion.Explainer(catboost_model)``, on float features and, trained with CatBoost's
  defaults, on categorical ones (CTRs of feature combinations).

Rows/s is the computation only (each explainer built once, before timing; the median of a few
runs); error is max |ours - theirs| / max |theirs|. Needs the release wheel (``pip install
./python``) and the pinned libraries of tests/requirements.txt plus catboost:

    python benchmarks/model_formats.py [--threads 2] [--rows 2000]

Writes the MODEL FORMATS section of benchmarks/RESULTS.md.
"""

import argparse
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (the machine line of every table)

import shapfusion  # noqa: E402
from python_wheel import median_seconds  # noqa: E402
from suite import write_results_section  # noqa: E402


def data(n: int, f: int, seed: int):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, f))
    y = X[:, 0] * 1.5 + np.sin(2 * X[:, 1]) + X[:, 2] * X[:, 3] + 0.5 * X[:, 4:].sum(axis=1) + 0.3 * r.normal(size=n)
    return X, y


def shap_layout(values, base, n: int, f: int) -> np.ndarray:
    sv = np.asarray(values, dtype=np.float64).reshape(n, f, -1)
    base = np.asarray(base, dtype=np.float64).reshape(-1)
    out = np.concatenate([sv.transpose(0, 2, 1), np.broadcast_to(base[None, :, None], (n, base.size, 1))], axis=2)
    return out[:, 0, :] if base.size == 1 else out


def categorical_data(n: int, X: np.ndarray, y: np.ndarray):
    """The first 17 numeric features of ``X`` and three categorical ones (40, 25 and 10
    categories) whose combination moves the target, as a frame; labels; the categorical columns."""
    import pandas as pd

    r = np.random.default_rng(7)
    codes = [r.integers(0, k, size=n) for k in (40, 25, 10)]
    frame = pd.DataFrame({f"f{j}": X[:n, j] for j in range(17)})
    cats = ["city", "shop", "segment"]
    for name, c in zip(cats, codes):
        frame[name] = [f"{name}{k}" for k in c]
    labels = (y[:n] + ((codes[0] * 7 + codes[1] * 3 + codes[2]) % 5 < 2) * 1.5 > 0.5).astype(int)
    return frame, labels, cats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=2000, help="rows explained per model")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import catboost
    import shap
    import sklearn
    from sklearn import ensemble

    X, y = data(20000, 20, 1)
    test = np.ascontiguousarray(X[: args.rows])
    n, f = test.shape
    models = [
        ("RandomForestClassifier (100 trees, depth 12)", ensemble.RandomForestClassifier(n_estimators=100, max_depth=12, n_jobs=args.threads, random_state=0), y > 0),
        ("GradientBoostingRegressor (300 trees, depth 5)", ensemble.GradientBoostingRegressor(n_estimators=300, max_depth=5, random_state=0), y),
        ("HistGradientBoostingClassifier (200 iterations, 31 leaves)", ensemble.HistGradientBoostingClassifier(max_iter=200, random_state=0), y > 0),
    ]
    rows = []
    for name, model, target in models:
        model.fit(X, target)
        ours = shapfusion.Explainer(model, threads=args.threads)
        ours_1 = shapfusion.Explainer(model, threads=1)
        theirs = shap.TreeExplainer(model, feature_perturbation="tree_path_dependent")
        # shap's C++ TreeSHAP runs on one thread; it has no thread setting: the same-threads
        # ratio is against shapfusion on one thread.
        t_shap = median_seconds(lambda: theirs.shap_values(test, check_additivity=False), 1)
        t_ours_1 = median_seconds(lambda: ours_1.shap_values(test), args.repeats)
        t_ours = median_seconds(lambda: ours.shap_values(test), args.repeats)
        reference = shap_layout(theirs.shap_values(test, check_additivity=False), theirs.expected_value, n, f)
        got = ours.shap_values(test)
        err = float(np.abs(got - reference).max() / np.abs(reference).max())
        rows.append((f"scikit-learn {name}", "shap TreeExplainer", 1, n / t_shap, n / t_ours_1, n / t_ours, err))
        print(rows[-1], flush=True)

    def catboost_row(name: str, model, rows_in, pool) -> None:
        """CatBoost's own ShapValues and shapfusion's on the same rows, at the same threads."""
        ours = shapfusion.Explainer(model, threads=args.threads)
        t_cb = median_seconds(lambda: model.get_feature_importance(pool, type="ShapValues", thread_count=args.threads), args.repeats)
        t_ours = median_seconds(lambda: ours.shap_values(rows_in), args.repeats)
        reference = np.asarray(model.get_feature_importance(pool, type="ShapValues", thread_count=args.threads))
        err = float(np.abs(ours.shap_values(rows_in) - reference).max() / np.abs(reference).max())
        rows.append((name, "CatBoost ShapValues", args.threads, n / t_cb, n / t_ours, n / t_ours, err))
        print(rows[-1], flush=True)

    for name, model in [
        ("CatBoostRegressor (500 trees, depth 6)", catboost.CatBoostRegressor(iterations=500, depth=6, random_seed=0, verbose=0, allow_writing_files=False)),
        ("CatBoostClassifier (300 trees, depth 8)", catboost.CatBoostClassifier(iterations=300, depth=8, random_seed=0, verbose=0, allow_writing_files=False)),
    ]:
        model.fit(X, y if "Regressor" in name else y > 0, verbose=0)
        catboost_row(name, model, test, catboost.Pool(test))

    # CatBoost as trained with its defaults on data with categorical features: from 200 trees on
    # it sets max_ctr_complexity to 4, so its splits include CTRs of feature combinations.
    frame, labels, cats = categorical_data(20000, X, y)
    model = catboost.CatBoostClassifier(iterations=500, random_seed=0, verbose=0, allow_writing_files=False, thread_count=args.threads)
    model.fit(frame, labels, cat_features=cats)
    test_frame = frame.iloc[: args.rows]
    catboost_row("CatBoostClassifier (500 trees, defaults, 3 categorical features: CTRs of combinations)", model, test_frame,
                 catboost.Pool(test_frame, cat_features=cats))

    lines = [
        "## scikit-learn and CatBoost models (benchmarks/model_formats.py)",
        "",
        f"Command: `python benchmarks/model_formats.py --threads {args.threads} --rows {args.rows}` (release wheel, `pip install ./python`). "
        f"Machine: {machine.describe()}; Python {platform.python_version()}; scikit-learn {sklearn.__version__}, "
        f"shap {shap.__version__}, catboost {catboost.__version__}, shapfusion {shapfusion.__version__}. Training data 20,000 rows × 20 features; "
        f"{n} rows explained; computation only, median of {args.repeats} runs (shap's: 1 run). shap's TreeExplainer has no thread "
        "setting and runs on one thread, so its same-threads ratio is against shapfusion on one thread; CatBoost runs with the "
        "threads given. error = max |shapfusion − peer| / max |peer| (shap computes scikit-learn's values itself in float64).",
        "",
        f"| model | peer | peer threads | peer rows/s | shapfusion rows/s, same threads | ratio, same threads | shapfusion rows/s, {args.threads} threads | ratio, {args.threads} threads | error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, peer, threads, r_peer, r_same, r_all, err in rows:
        lines.append(
            f"| {model} | {peer} | {threads} | {r_peer:,.0f} | {r_same:,.0f} | {r_same / r_peer:.1f}× | {r_all:,.0f} | {r_all / r_peer:.1f}× | {err:.1e} |"
        )
    write_results_section("MODEL FORMATS", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
