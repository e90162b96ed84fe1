#!/usr/bin/env python3
"""Regenerate the CatBoost fixtures (tests/fixtures/cb_*).

Each fixture holds
  model.json       the model as CatBoost saves it: ``model.save_model(path, format="json")``
  input.parquet    the rows to explain (NaN where the model was trained with missing values)
  expected.json    CatBoost's own outputs: ``get_feature_importance(type="ShapValues")`` and
                   ``"ShapInteractionValues"`` (float64; the bias row and column in XGBoost's
                   layout: the expected value in the bias cell, zeros elsewhere), and the raw
                   margin from
                   ``predict(prediction_type="RawFormulaVal")``

Usage:  python tests/make_catboost_fixtures.py [--out tests/fixtures]
Versions are pinned in tests/requirements.txt.
"""
from __future__ import annotations

import json

import catboost
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from fixture_common import f64_list, output_dir, regression_rows, write_input

SEED = 20261126
ROWS = 30


def data(n: int, f: int, seed: int, nan: float = 0.0):
    return regression_rows(n, f, SEED + seed, nan)


def write(out, name: str, model, X, interactions: bool = True, cat_features=None) -> None:
    d = out / name
    d.mkdir(parents=True)
    model.save_model(str(d / "model.json"), format="json")
    if cat_features:
        names = list(X.columns)
        pq.write_table(pa.Table.from_pandas(X, preserve_index=False), d / "input.parquet")
    else:
        names = [f"f{j}" for j in range(X.shape[1])]
        write_input(d / "input.parquet", X, names)
    pool = catboost.Pool(X, cat_features=cat_features)
    n, f = X.shape
    sv = np.asarray(model.get_feature_importance(pool, type="ShapValues"), dtype=np.float64).reshape(n, -1, f + 1)
    groups = sv.shape[1]
    margin = np.asarray(model.predict(pool, prediction_type="RawFormulaVal"), dtype=np.float64).reshape(n, groups)
    inter = None
    if interactions:
        iv = np.asarray(model.get_feature_importance(pool, type="ShapInteractionValues"), dtype=np.float64)
        inter = iv.reshape(n, groups, f + 1, f + 1).copy()
        # CatBoost's bias row and column vary (0, or on models with categorical features the
        # expected value in every cell); XGBoost's layout, which shapfusion writes, holds the
        # expected value in the bias cell only, so every row of the matrix sums to that row's
        # SHAP values. The feature-by-feature block is CatBoost's as it computed it.
        inter[:, :, f, :] = 0.0
        inter[:, :, :, f] = 0.0
        inter[:, :, f, f] = sv[:, :, f]
    expected = {
        "library": "catboost", "version": catboost.__version__, "reference": "catboost get_feature_importance",
        "rows": n, "groups": groups, "features": names, "precision": "float64",
        "contribs": f64_list(sv), "interactions": None if inter is None else f64_list(inter), "margin": f64_list(margin),
    }
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"{name}: {model.tree_count_} trees, additivity of CatBoost's values {np.abs(sv.sum(axis=2) - margin).max():.2e}")


def main() -> None:
    out = output_dir(["cb_binary_missing", "cb_multiclass", "cb_regression_deep", "cb_one_hot_categories"])

    X, y = data(800, 6, 1, nan=0.06)
    m = catboost.CatBoostClassifier(iterations=20, depth=5, random_seed=0, verbose=0, allow_writing_files=False, nan_mode="Max").fit(X, y > 0.2)
    write(out, "cb_binary_missing", m, X[:ROWS])

    X, y = data(800, 5, 2, nan=0.03)
    m = catboost.CatBoostClassifier(iterations=12, depth=4, loss_function="MultiClass", random_seed=0, verbose=0, allow_writing_files=False).fit(X, np.digitize(y, [-1.0, 1.0]))
    write(out, "cb_multiclass", m, X[:ROWS])

    # Depth 12: most of the 4096 leaves of each tree are empty (weight 0).
    X, y = data(3000, 6, 3)
    m = catboost.CatBoostRegressor(iterations=4, depth=12, random_seed=0, verbose=0, allow_writing_files=False).fit(X, y)
    write(out, "cb_regression_deep", m, X[:ROWS], interactions=False)

    # One-hot categorical features (few categories, one_hot_max_size above them): a string
    # column and an integer one, which CatBoost hashes as its digits; the rows include a
    # category not seen in training.
    r = np.random.default_rng(SEED + 4)
    X, y = data(1500, 4, 4)
    df = pd.DataFrame({"f0": X[:, 0], "f1": X[:, 1], "colour": r.choice(["red", "green", "blue"], size=len(X)),
                       "grade": r.integers(1, 5, size=len(X))})
    y = y + (df["colour"] == "green") * 1.5 - (df["grade"] == 3) * 1.0
    m = catboost.CatBoostRegressor(iterations=15, depth=4, one_hot_max_size=10, random_seed=0, verbose=0,
                                   allow_writing_files=False).fit(df, y, cat_features=["colour", "grade"])
    test = df.iloc[:ROWS].copy()
    test.loc[test.index[0], "colour"] = "purple"
    test.loc[test.index[1], "grade"] = 9
    write(out, "cb_one_hot_categories", m, test, cat_features=["colour", "grade"])


if __name__ == "__main__":
    main()
