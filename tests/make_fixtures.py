#!/usr/bin/env python3
"""Regenerate the committed test fixtures in tests/fixtures/.

Every fixture is a directory holding
  model.json | model.ubj | model.txt   the model, saved by the library itself
  input.parquet                        the rows to explain (nulls and NaNs both mean "missing")
  expected.json                        reference outputs computed by the library itself

Reference outputs:
  * XGBoost 3.2 ``pred_contribs`` / ``pred_interactions`` (exact TreeSHAP; XGBoost 3.4 switched
    to an approximate 8-point quadrature, so it cannot serve as a reference).
  * LightGBM ``pred_contrib`` for SHAP values. LightGBM has no interaction API; where the model
    has no categorical splits we take interaction values from shap's TreeExplainer when shap is
    installed (it is optional), otherwise interactions are checked by their own identities.

Usage:  python tests/make_fixtures.py [--out tests/fixtures]
Versions are pinned in tests/requirements.txt.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import lightgbm as lgb
import numpy as np
import xgboost as xgb
from fixture_common import f64_list, write_input, xgboost_expected
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine, make_regression

SEED = 20261121
ROWS = 40


def rng(offset: int = 0) -> np.random.Generator:
    return np.random.default_rng(SEED + offset)


def near_threshold_rows(booster: xgb.Booster, X: np.ndarray, count: int) -> np.ndarray:
    """Rows whose values sit one float64 ulp below a split threshold.

    XGBoost casts inputs to float32 before comparing, so such a value rounds up to the threshold
    and goes right; comparing in float64 would send it left. These rows pin that behaviour.
    """
    gb = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]
    trees = (gb["gbtree"] if gb["name"] == "dart" else gb)["model"]["trees"]
    splits = [(f, t) for tree in trees
              for f, t, left in zip(tree["split_indices"], tree["split_conditions"],
                                    tree["left_children"]) if left != -1]
    out = X[:count].copy()
    r = rng(7)
    for i in range(count):
        j, thr = splits[int(r.integers(len(splits)))]
        out[i, j] = np.nextafter(np.float64(np.float32(thr)), -np.inf)
    return out


def xgb_fixture(out: Path, name: str, X, y, params, rounds, X_test, names=None, feature_types=None,
                fmt="json", nthread=2):
    d = out / name
    shutil.rmtree(d, ignore_errors=True)  # only this fixture: other scripts write beside it
    d.mkdir(parents=True)
    dtrain = xgb.DMatrix(X, y, feature_names=names, feature_types=feature_types,
                         enable_categorical=feature_types is not None, missing=np.nan)
    params = {"nthread": nthread, "seed": SEED, **params}
    booster = xgb.train(params, dtrain, num_boost_round=rounds)
    if feature_types is None:
        X_test = np.vstack([X_test, near_threshold_rows(booster, X_test, 8)])
    dtest = xgb.DMatrix(X_test, feature_names=names, feature_types=feature_types,
                        enable_categorical=feature_types is not None, missing=np.nan)
    booster.save_model(str(d / f"model.{fmt}"))
    col_names = names or [f"f{i}" for i in range(X.shape[1])]
    write_input(d / "input.parquet", X_test, col_names)
    expected = xgboost_expected(xgb, booster, dtest, col_names)
    n, g = expected["rows"], expected["groups"]
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"{name}: {n} rows, {g} groups, {len(col_names)} features")


def lgb_fixture(out: Path, name: str, X, y, params, rounds, X_test, categorical=None, shap_ok=True):
    d = out / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    names = [f"x{i}" for i in range(X.shape[1])]
    params = {"verbose": -1, "num_threads": 2, "seed": SEED, "deterministic": True, **params}
    ds = lgb.Dataset(X, y, feature_name=names,
                     categorical_feature=categorical if categorical else "auto")
    booster = lgb.train(params, ds, num_boost_round=rounds)
    booster.save_model(str(d / "model.txt"))
    contribs = booster.predict(X_test, pred_contrib=True)
    margin = booster.predict(X_test, raw_score=True)
    n, f = X_test.shape
    g = contribs.shape[1] // (f + 1)
    expected = {
        "library": "lightgbm", "version": lgb.__version__, "rows": n, "groups": g,
        "features": names, "precision": "float64",
        "contribs": f64_list(contribs.reshape(n, g, f + 1)),
        "interactions": None,
        "margin": f64_list(np.asarray(margin).reshape(n, g)),
    }
    if shap_ok:
        try:
            import shap  # optional
            inter = np.asarray(shap.TreeExplainer(booster).shap_interaction_values(X_test))
            if g == 1:
                inter = inter[:, None]
            else:
                inter = np.moveaxis(inter, 0, 1) if inter.shape[0] == g else inter
            full = np.zeros((n, g, f + 1, f + 1))
            full[:, :, :f, :f] = inter[:, :, :f, :f]
            full[:, :, f, f] = contribs.reshape(n, g, f + 1)[:, :, f]
            expected["interactions"] = f64_list(full)
            expected["interactions_source"] = f"shap {shap.__version__}"
        except ImportError:
            pass
    write_input(d / "input.parquet", X_test, names)
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"{name}: {n} rows, {g} groups, {f} features")


def with_missing(X: np.ndarray, frac: float, offset: int) -> np.ndarray:
    X = X.copy()
    X[rng(offset).random(X.shape) < frac] = np.nan
    return X


def categorical_data(n: int, offset: int):
    r = rng(offset)
    x0 = r.normal(size=n)
    c1 = r.integers(0, 6, size=n).astype(np.float64)
    x2 = r.normal(size=n)
    c3 = r.integers(0, 12, size=n).astype(np.float64)
    effect1 = np.array([0.0, 2.0, -1.0, 0.5, 3.0, -2.0])
    effect3 = np.sin(np.arange(12))
    y = x0 + effect1[c1.astype(int)] + 2 * effect3[c3.astype(int)] + 0.3 * x2 * (c1 > 2)
    y += r.normal(scale=0.1, size=n)
    X = np.column_stack([x0, c1, x2, c3])
    return X, y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).parent / "fixtures"))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)

    Xd, yd = load_diabetes(return_X_y=True)
    Xb, yb = load_breast_cancer(return_X_y=True)
    bc_names = [n.replace(" ", "_") for n in load_breast_cancer().feature_names]
    Xw, yw = load_wine(return_X_y=True)

    # --- XGBoost -------------------------------------------------------------------------------
    xgb_fixture(out, "xgb_regression", Xd, yd,
                {"objective": "reg:squarederror", "max_depth": 4, "eta": 0.3}, 20, Xd[:ROWS])
    xgb_fixture(out, "xgb_binary_ubj", Xb, yb,
                {"objective": "binary:logistic", "max_depth": 4, "eta": 0.3}, 20, Xb[:ROWS],
                names=bc_names, fmt="ubj")
    xgb_fixture(out, "xgb_multiclass", Xw, yw,
                {"objective": "multi:softprob", "num_class": 3, "max_depth": 3, "eta": 0.3}, 10,
                Xw[:ROWS])
    Xm = with_missing(Xd, 0.2, 1)
    xgb_fixture(out, "xgb_missing", Xm, yd,
                {"objective": "reg:squarederror", "max_depth": 5, "eta": 0.3}, 15, Xm[:ROWS])
    Xc, yc = categorical_data(2000, 2)
    Xc_test = Xc[:ROWS].copy()
    Xc_test[0, 1] = np.nan          # missing category -> default direction
    Xc_test[1, 1] = 17              # category never seen in training
    Xc_test[2, 3] = np.nan
    xgb_fixture(out, "xgb_categorical", Xc, yc,
                {"objective": "reg:squarederror", "max_depth": 4, "eta": 0.3,
                 "max_cat_to_onehot": 1, "tree_method": "hist"}, 15, Xc_test,
                names=["x0", "c1", "x2", "c3"], feature_types=["q", "c", "q", "c"])
    xgb_fixture(out, "xgb_dart", Xb, yb,
                {"booster": "dart", "objective": "binary:logistic", "max_depth": 3, "eta": 0.3,
                 "rate_drop": 0.3, "skip_drop": 0.0}, 12, Xb[:ROWS])
    Xr, yr = make_regression(n_samples=3000, n_features=20, n_informative=12, noise=5.0,
                             random_state=SEED % 2**31)
    xgb_fixture(out, "xgb_deep", Xr, yr,
                {"objective": "reg:squarederror", "max_depth": 13, "eta": 0.3,
                 "min_child_weight": 0, "lambda": 0.1}, 6, Xr[:ROWS])
    xgb_fixture(out, "xgb_forest", Xb, yb,
                {"objective": "binary:logistic", "max_depth": 4, "eta": 1.0,
                 "num_parallel_tree": 4, "subsample": 0.7, "colsample_bynode": 0.7}, 3, Xb[:ROWS])
    xgb_fixture(out, "xgb_poisson", Xd, np.round(yd / 10),
                {"objective": "count:poisson", "max_depth": 3, "eta": 0.3}, 10, Xd[:ROWS])

    # --- LightGBM ------------------------------------------------------------------------------
    lgb_fixture(out, "lgb_regression", Xd, yd,
                {"objective": "regression", "num_leaves": 15, "learning_rate": 0.2}, 20, Xd[:ROWS])
    Xbm = with_missing(Xb, 0.15, 3)
    lgb_fixture(out, "lgb_binary_missing", Xbm, yb,
                {"objective": "binary", "num_leaves": 8, "learning_rate": 0.2}, 15, Xbm[:ROWS])
    lgb_fixture(out, "lgb_multiclass", Xw, yw,
                {"objective": "multiclass", "num_class": 3, "num_leaves": 6, "learning_rate": 0.2,
                 "min_data_in_leaf": 5}, 8, Xw[:ROWS])
    Xz = Xd.copy()
    Xz[rng(4).random(Xz.shape) < 0.2] = 0.0
    lgb_fixture(out, "lgb_zero_missing", Xz, yd,
                {"objective": "regression", "num_leaves": 10, "zero_as_missing": True,
                 "learning_rate": 0.2}, 10, Xz[:ROWS])
    lgb_fixture(out, "lgb_categorical", Xc, yc,
                {"objective": "regression", "num_leaves": 12, "learning_rate": 0.2,
                 "min_data_per_group": 5, "cat_smooth": 1, "max_cat_to_onehot": 2}, 15, Xc_test,
                categorical=[1, 3], shap_ok=False)


if __name__ == "__main__":
    main()
