#!/usr/bin/env python3
"""Regenerate the fixtures of XGBoost vector-leaf models (tests/fixtures/xgb_vector_leaf*):
`multi_strategy="multi_output_tree"`, one tree whose leaves hold a value per target.

References are XGBoost 3.4's own `pred_contribs` / `pred_interactions` (3.3 is the first
release that explains these models). 3.4 computes them with an 8-point quadrature, exact to
float precision while a path tests at most 8 distinct features; these models have 6 features,
so the references are exact and the engines must match them as they match XGBoost 3.2's.

XGBoost 3.4 needs Python >= 3.12:
  python3.12 -m venv .venv312 && .venv312/bin/pip install -r benchmarks/requirements-xgb34.txt
  .venv312/bin/python tests/make_vector_leaf_fixtures.py [--out tests/fixtures]
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xgboost as xgb

from fixture_common import output_dir, write_input, xgboost_expected

SEED = 20261124
ROWS = 40


def data(n: int, offset: int) -> np.ndarray:
    r = np.random.default_rng(SEED + offset)
    X = r.normal(size=(n, 6))
    X[r.random(X.shape) < 0.08] = np.nan
    return X


def fixture(out: Path, name: str, params: dict, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, rounds: int) -> None:
    d = out / name
    d.mkdir(parents=True)
    params = {"nthread": 2, "seed": SEED, "tree_method": "hist", "multi_strategy": "multi_output_tree", **params}
    booster = xgb.train(params, xgb.DMatrix(X, y, missing=np.nan), num_boost_round=rounds)
    booster.save_model(str(d / "model.json"))
    names = [f"f{i}" for i in range(X.shape[1])]
    write_input(d / "input.parquet", X_test, names)
    expected = xgboost_expected(xgb, booster, xgb.DMatrix(X_test, missing=np.nan), names)
    n, g = expected["rows"], expected["groups"]
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"{name}: {n} rows, {g} targets, XGBoost {xgb.__version__}")


def main() -> None:
    out = output_dir(["xgb_vector_leaf", "xgb_vector_leaf_multiclass"])
    X, X_test = data(2000, 0), data(ROWS, 1)
    Z = np.nan_to_num(X)
    y = np.column_stack([Z[:, 0] + Z[:, 1] * Z[:, 2], Z[:, 1] - Z[:, 3] ** 2, np.sin(Z[:, 4]) + Z[:, 5]])
    fixture(out, "xgb_vector_leaf", {"objective": "reg:squarederror", "max_depth": 5, "eta": 0.3}, X, y, X_test, 12)
    labels = np.argmax(np.column_stack([Z[:, 0], Z[:, 1] + Z[:, 2], Z[:, 3] * Z[:, 4]]), axis=1)
    fixture(out, "xgb_vector_leaf_multiclass", {"objective": "multi:softprob", "num_class": 3, "max_depth": 4, "eta": 0.3},
            X, labels, X_test, 10)


if __name__ == "__main__":
    main()
