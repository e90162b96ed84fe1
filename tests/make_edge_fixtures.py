#!/usr/bin/env python3
"""Regenerate the edge-value fixtures (tests/fixtures/*_edge_values): models the libraries train,
load and predict with whose files hold the values a reader could wrongly refuse.

  lgb_edge_values   LightGBM, 4 classes, one of them absent from the labels: its trees are single
                    leaves (``num_leaves=1``, no split fields); a feature whose missingness
                    decides the class: splits at ``threshold=inf`` (every number one way, NaN
                    the other). Reference: LightGBM's ``pred_contrib``.
  xgb_edge_values   XGBoost: a feature at ±3.4e38 (splits at float32 values next to its
                    largest), -0.0 among the inputs, trees pruned after training (nodes left in
                    the arrays that no path reaches, ``num_deleted``), rounds trained on with a
                    split penalty no gain passes (single-leaf trees), and splits at ±inf and NaN
                    (written by XGBoost as ``Infinity`` / ``NaN``; ``xgb_edge_values_ubj`` is the
                    same model as UBJSON). Reference: XGBoost 3.2's exact ``pred_contribs`` /
                    ``pred_interactions``.

Zero-cover nodes (Depthwise trees split empty nodes) are in the CatBoost fixtures
``cb_depthwise_*`` (tests/make_catboost_fixtures.py). Each script asserts that its models hold
what it is for, so a library change that stops writing such a value fails here.

Usage:  python tests/make_edge_fixtures.py [--out tests/fixtures]
Versions are pinned in tests/requirements.txt.
"""
from __future__ import annotations

import json

import lightgbm as lgb
import numpy as np
import xgboost as xgb
from fixture_common import f64_list, output_dir, write_input, xgboost_expected

SEED = 20261127
ROWS = 40


def lightgbm_edge_values(out) -> None:
    d = out / "lgb_edge_values"
    d.mkdir(parents=True)
    r = np.random.default_rng(SEED)
    n = 3000
    X = r.normal(size=(n, 4))
    missing = r.random(n) < 0.4
    X[missing, 0] = np.nan
    X[r.random(n) < 0.05, 2] = np.nan
    # Class 3 never occurs; missing x0 means class 0 or 2, else x1 decides between 1 and 2.
    y = np.where(missing, 2 * (r.random(n) < 0.3), 1 + (X[:, 1] > 0.5))
    names = [f"x{j}" for j in range(4)]
    params = {"objective": "multiclass", "num_class": 4, "num_leaves": 6, "min_data_in_leaf": 5, "verbose": -1, "num_threads": 2, "seed": SEED, "deterministic": True}
    booster = lgb.train(params, lgb.Dataset(X, y, feature_name=names), num_boost_round=6)
    booster.save_model(str(d / "model.txt"))
    text = (d / "model.txt").read_text()
    thresholds = [w for line in text.splitlines() if line.startswith("threshold=") for w in line[len("threshold="):].split()]
    assert "inf" in thresholds or "-inf" in thresholds, "no split at an infinite threshold"
    assert "num_leaves=1" in text, "no single-leaf tree"
    X_test = X[:ROWS].copy()
    X_test[:3, 0] = np.nan  # both sides of the inf splits
    contribs = booster.predict(X_test, pred_contrib=True)
    margin = booster.predict(X_test, raw_score=True)
    f, g = X_test.shape[1], 4
    expected = {
        "library": "lightgbm", "version": lgb.__version__, "rows": ROWS, "groups": g, "features": names, "precision": "float64",
        "contribs": f64_list(contribs.reshape(ROWS, g, f + 1)), "interactions": None, "margin": f64_list(margin.reshape(ROWS, g)),
    }
    write_input(d / "input.parquet", X_test, names)
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"lgb_edge_values: {thresholds.count('inf') + thresholds.count('-inf')} splits at an infinite threshold, {text.count('num_leaves=1')} single-leaf trees")


def xgboost_edge_values(out) -> None:
    d = out / "xgb_edge_values"
    d.mkdir(parents=True)
    r = np.random.default_rng(SEED + 1)
    n = 800
    X = r.normal(size=(n, 4))
    X[:, 2] = np.where(r.random(n) < 0.5, 3.4e38, -3.4e38)
    X[r.random(n) < 0.1, 3] = -0.0
    X[r.random(n) < 0.05, 1] = np.nan
    y = X[:, 0] + (X[:, 2] > 0) * 2.0 + 0.1 * r.normal(size=n)
    names = [f"f{j}" for j in range(4)]
    dtrain = xgb.DMatrix(X, y, feature_names=names)
    booster = xgb.train({"max_depth": 4, "nthread": 2, "seed": SEED}, dtrain, 4)
    # Pruned after training: the pruned nodes stay in the arrays, reached by no path.
    booster = xgb.train({"process_type": "update", "updater": "prune", "gamma": 2.0, "nthread": 2}, dtrain, 4, xgb_model=booster)
    # Rounds no split can pass: single-leaf trees.
    booster = xgb.train({"max_depth": 3, "gamma": 1e9, "nthread": 2, "seed": SEED}, dtrain, 2, xgb_model=booster)
    # Splits at ±inf and NaN: XGBoost's training does not make them, its loader takes them
    # (from `Infinity` / `NaN` in its JSON) and its writers keep them; two splits of the first
    # tree are set so and the model goes through XGBoost's own load and save.
    raw = json.loads(booster.save_raw(raw_format="json"))
    first = raw["learner"]["gradient_booster"]["model"]["trees"][0]
    internal = [i for i, left in enumerate(first["left_children"]) if left != -1]
    for i, value in zip(internal[1:4], ["Infinity", "-Infinity", "NaN"]):
        first["split_conditions"][i] = value
    edited = json.dumps(raw).replace('"Infinity"', "Infinity").replace('"-Infinity"', "-Infinity").replace('"NaN"', "NaN")
    booster = xgb.Booster()
    booster.load_model(bytearray(edited.encode()))
    booster.save_model(str(d / "model.json"))
    text = (d / "model.json").read_text()
    assert "Infinity" in text and "NaN" in text, "XGBoost no longer writes non-finite splits as Infinity / NaN"
    model = json.loads(text.replace("-Infinity", "null").replace("Infinity", "null").replace("NaN", "null"))
    trees = model["learner"]["gradient_booster"]["model"]["trees"]
    assert any(int(t["tree_param"]["num_deleted"]) > 0 for t in trees), "no pruned nodes"
    assert any(len(t["left_children"]) == 1 for t in trees), "no single-leaf tree"
    largest = max(abs(c) for t in trees for c, left in zip(t["split_conditions"], t["left_children"]) if left != -1 and c is not None)
    assert largest > 1e38, f"no split next to float32's largest ({largest})"
    X_test = X[:ROWS]
    dtest = xgb.DMatrix(X_test, feature_names=names)
    expected = json.dumps(xgboost_expected(xgb, booster, dtest, names))
    write_input(d / "input.parquet", X_test, names)
    (d / "expected.json").write_text(expected)
    # The same model as XGBoost's UBJSON, where the non-finite splits are float32 values.
    u = out / "xgb_edge_values_ubj"
    u.mkdir(parents=True)
    booster.save_model(str(u / "model.ubj"))
    write_input(u / "input.parquet", X_test, names)
    (u / "expected.json").write_text(expected)
    print(f"xgb_edge_values (and _ubj): {len(trees)} trees, splits at ±inf and NaN, largest finite split condition {largest:.4g}")


def main() -> None:
    out = output_dir(["lgb_edge_values", "xgb_edge_values", "xgb_edge_values_ubj"])
    lightgbm_edge_values(out)
    xgboost_edge_values(out)


if __name__ == "__main__":
    main()
