#!/usr/bin/env python3
"""Regenerate the scikit-learn fixtures (tests/fixtures/skl_*).

Each fixture holds
  model.json       the fitted estimator as a shapfusion trees file (python/shapfusion/_trees_file.py,
                   what ``shapfusion.save_model`` writes)
  input.parquet    the rows to explain (NaN where the estimator allows missing values)
  expected.json    reference outputs

References:
  * SHAP values and interaction values: shap's TreeExplainer (path-dependent), which computes
    them itself for scikit-learn models in float64. Where shap cannot take the estimator
    (a multiclass GradientBoostingClassifier, HistGradientBoosting with categorical splits), the
    reference is shap's own algorithm on each class's trees as a shap dict model, or brute-force
    path-dependent Shapley values (all coalitions) from the estimator's own split rules; the
    fixture's ``reference`` field says which.
  * Margins: the estimator itself (``predict_proba``, ``decision_function``, ``predict``, and for
    IsolationForest the mean path length E[h(x)] recovered from ``score_samples``), so the
    attributions' sum is checked against the library.

Usage:  python tests/make_sklearn_fixtures.py [--out tests/fixtures]
Versions are pinned in tests/requirements.txt.
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import math
from pathlib import Path

import numpy as np
import shap
import sklearn
import pyarrow.parquet as pq
from fixture_common import background_table, f64_list, output_dir, regression_rows, write_input
from sklearn import ensemble, tree

SEED = 20261125
ROWS = 30

_spec = importlib.util.spec_from_file_location("_trees_file", Path(__file__).parent.parent / "python/shapfusion/_trees_file.py")
trees_file = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trees_file)


def data(n: int, f: int, seed: int, nan: float = 0.0):
    return regression_rows(n, f, SEED + seed, nan)


def shap_reference(model, X: np.ndarray, groups: int, interactions: bool = True) -> tuple[list, list | None]:
    """shap's path-dependent values as (rows, groups, F+1) and (rows, groups, F+1, F+1)."""
    e = shap.TreeExplainer(model, feature_perturbation="tree_path_dependent")
    n, f = X.shape
    sv = np.asarray(e.shap_values(X, check_additivity=False), dtype=np.float64).reshape(n, f, -1)
    base = np.asarray(e.expected_value, dtype=np.float64).reshape(-1)
    assert sv.shape[2] == groups and base.size == groups, (sv.shape, base.shape, groups)
    contribs = np.zeros((n, groups, f + 1))
    contribs[:, :, :f] = sv.transpose(0, 2, 1)
    contribs[:, :, f] = base
    inter = None
    if interactions:
        iv = np.asarray(e.shap_interaction_values(X), dtype=np.float64).reshape(n, f, f, -1)
        inter = np.zeros((n, groups, f + 1, f + 1))
        inter[:, :, :f, :f] = iv.transpose(0, 3, 1, 2)
        inter[:, :, f, f] = base
    return contribs, inter


def brute_force(model_dict: dict, X: np.ndarray) -> np.ndarray:
    """Path-dependent Shapley values by all coalitions, from a shapfusion trees dict (F <= 10).

    v(S) is the path-dependent conditional expectation: a split on a feature in S follows the
    row (by the estimator's own rule, mirrored below), any other split averages its children by
    cover. The margins these sum to are checked against the estimator's own predictions."""
    F = len(model_dict["feature_names"])
    G = model_dict["num_outputs"]

    def goes_left(t, i, x):
        v = x[t["feature"][i]]
        cat = t.get("_cats", {}).get(i)
        if math.isnan(v):
            return t["missing_left"][i]
        if cat is not None:
            left, known = cat
            if v < 0:
                return t["missing_left"][i]
            code = int(v)
            if code in left:
                return True
            if known is not None and code not in known:
                return t["missing_left"][i]
            return False
        return v <= t["threshold"][i]

    for t in model_dict["trees"]:
        t["_cats"] = {s["node"]: (set(s["left_categories"]), None if s.get("known_categories") is None else set(s["known_categories"]))
                      for s in t.get("categorical_splits", [])}

    def expect(t, i, x, S):
        if t["left"][i] == -1:
            return t["value"][i]
        l, r = t["left"][i], t["right"][i]
        if t["feature"][i] in S:
            return expect(t, l if goes_left(t, i, x) else r, x, S)
        c = t["cover"][i]
        return (t["cover"][l] * expect(t, l, x, S) + t["cover"][r] * expect(t, r, x, S)) / c

    out = np.zeros((len(X), G, F + 1))
    for n, x in enumerate(X):
        v = {}
        for size in range(F + 1):
            for S in itertools.combinations(range(F), size):
                vals = np.array(model_dict["base_margin"], dtype=np.float64)
                for t in model_dict["trees"]:
                    vals[t["output"]] += t["weight"] * expect(t, 0, x, set(S))
                v[frozenset(S)] = vals
        for i in range(F):
            for size in range(F):
                for S in itertools.combinations([j for j in range(F) if j != i], size):
                    w = math.factorial(size) * math.factorial(F - size - 1) / math.factorial(F)
                    out[n, :, i] += w * (v[frozenset(S) | {i}] - v[frozenset(S)])
        out[n, :, F] = v[frozenset()]
    for t in model_dict["trees"]:
        del t["_cats"]
    return out


def write(out: Path, name: str, estimator, X: np.ndarray, margin: np.ndarray, contribs: np.ndarray,
          inter: np.ndarray | None, reference: str) -> None:
    d = out / name
    d.mkdir(parents=True)
    model = trees_file.to_dict(estimator)
    (d / "model.json").write_text(json.dumps(model, allow_nan=False, separators=(",", ":")))
    names = model["feature_names"]
    write_input(d / "input.parquet", X, names)
    n, g = contribs.shape[0], contribs.shape[1]
    expected = {
        "library": "scikit-learn", "version": sklearn.__version__, "shap": shap.__version__, "reference": reference,
        "estimator": type(estimator).__name__, "rows": n, "groups": g, "features": names, "precision": "float64",
        "contribs": f64_list(contribs), "interactions": None if inter is None else f64_list(inter),
        "margin": f64_list(np.asarray(margin, dtype=np.float64).reshape(n, g)),
    }
    (d / "expected.json").write_text(json.dumps(expected))
    err = np.abs(contribs.sum(axis=2) - np.asarray(margin).reshape(n, g)).max()
    print(f"{name}: {len(model['trees'])} trees, additivity of the reference vs the estimator {err:.2e}")


def interventional(out: Path, name: str, estimator, margin_of, size: int, seed: int) -> None:
    """background_<size>.parquet and interventional_<size>.json beside a fixture, in the layout of
    tests/make_interventional_fixtures.py: the estimator's mean margin over the background and
    shap's interventional values over the whole background (Independent masker, max_samples =
    every row; shap keeps 100 otherwise)."""
    d = out / name
    rows = pq.read_table(d / "input.parquet")
    bg_table = background_table(rows, size, np.random.default_rng(SEED + seed))
    pq.write_table(bg_table, d / f"background_{size}.parquet")
    X = rows.to_pandas().to_numpy(dtype=np.float64)
    bg = bg_table.to_pandas().to_numpy(dtype=np.float64)
    mean_margin = np.asarray(margin_of(bg), dtype=np.float64).reshape(size, -1).mean(axis=0)
    masker = shap.maskers.Independent(bg, max_samples=len(bg))
    e = shap.TreeExplainer(estimator, data=masker, feature_perturbation="interventional", model_output="raw")
    n, f = X.shape
    groups = mean_margin.size
    values = np.asarray(e.shap_values(X, check_additivity=False), dtype=np.float64).reshape(n, f, groups).transpose(0, 2, 1)
    doc = {"background_rows": size, "library": "scikit-learn", "library_mean_margin": [float(v) for v in mean_margin],
           "shap": shap.__version__, "rows": n, "groups": groups, "features": f, "values": [float(v) for v in values.ravel()],
           "shap_expected_value": [float(v) for v in np.atleast_1d(e.expected_value)]}
    (d / f"interventional_{size}.json").write_text(json.dumps(doc))
    print(f"{name}: background {size}")


def main() -> None:
    names = ["skl_decision_tree_deep", "skl_random_forest", "skl_extra_trees_multiclass", "skl_forest_multioutput",
             "skl_gradient_boosting", "skl_gradient_boosting_binary", "skl_gradient_boosting_multiclass",
             "skl_hist_gradient_boosting", "skl_hist_multiclass", "skl_hist_categorical", "skl_isolation_forest"]
    out = output_dir(names)

    # A deep regression tree (depth 14) trained with missing values: NaN follows missing_go_to_left.
    X, y = data(3000, 6, 1, nan=0.05)
    m = tree.DecisionTreeRegressor(max_depth=14, min_samples_leaf=2, random_state=0).fit(X, y)
    Xt = X[:ROWS]
    c, i = shap_reference(m, Xt, 1)
    write(out, "skl_decision_tree_deep", m, Xt, m.predict(Xt), c, i, "shap")

    # A binary random forest with missing values: class probabilities, one output per class.
    X, y = data(600, 5, 2, nan=0.05)
    m = ensemble.RandomForestClassifier(n_estimators=12, max_depth=7, random_state=0).fit(X, y > 0)
    Xt = X[:ROWS]
    c, i = shap_reference(m, Xt, 2)
    write(out, "skl_random_forest", m, Xt, m.predict_proba(Xt), c, i, "shap")
    interventional(out, "skl_random_forest", m, m.predict_proba, 50, 1)

    # Multiclass extra trees.
    X, y = data(600, 5, 3, nan=0.04)
    cls = np.digitize(y, [-1.0, 1.0])
    m = ensemble.ExtraTreesClassifier(n_estimators=10, max_depth=8, random_state=0).fit(X, cls)
    Xt = X[:ROWS]
    c, i = shap_reference(m, Xt, 3)
    write(out, "skl_extra_trees_multiclass", m, Xt, m.predict_proba(Xt), c, i, "shap")
    interventional(out, "skl_extra_trees_multiclass", m, m.predict_proba, 30, 2)

    # A two-target regression forest.
    X, y = data(500, 4, 4)
    m = ensemble.RandomForestRegressor(n_estimators=8, max_depth=6, random_state=0).fit(X, np.c_[y, X[:, 1] - y])
    Xt = X[:ROWS]
    c, i = shap_reference(m, Xt, 2)
    write(out, "skl_forest_multioutput", m, Xt, m.predict(Xt), c, i, "shap")

    # Gradient boosting: the init_ constant as base margin, learning_rate as tree weight.
    X, y = data(500, 5, 5)
    m = ensemble.GradientBoostingRegressor(n_estimators=30, max_depth=4, learning_rate=0.1, random_state=0).fit(X, y)
    Xt = X[:ROWS]
    c, i = shap_reference(m, Xt, 1)
    write(out, "skl_gradient_boosting", m, Xt, m.predict(Xt), c, i, "shap")
    interventional(out, "skl_gradient_boosting", m, m.predict, 40, 4)

    m = ensemble.GradientBoostingClassifier(n_estimators=25, max_depth=3, random_state=0).fit(X, y > 0.3)
    c, i = shap_reference(m, Xt, 1)
    write(out, "skl_gradient_boosting_binary", m, Xt, m.decision_function(Xt), c, i, "shap")

    # Multiclass gradient boosting: shap refuses it, so each class's trees go through shap's
    # algorithm as a shap dict model.
    cls = np.digitize(y, [-1.0, 1.0])
    m = ensemble.GradientBoostingClassifier(n_estimators=15, max_depth=3, random_state=0).fit(X, cls)
    model = trees_file.to_dict(m)
    cs, its = [], []
    for k in range(3):
        ts = [t for t in model["trees"] if t["output"] == k]
        shap_trees = [{
            "children_left": np.array(t["left"]), "children_right": np.array(t["right"]),
            "children_default": np.where(np.array(t["missing_left"]), np.array(t["left"]), np.array(t["right"])),
            "features": np.array(t["feature"]), "thresholds": np.array(t["threshold"]),
            "values": np.array(t["value"])[:, None] * t["weight"], "node_sample_weight": np.array(t["cover"]),
        } for t in ts]
        e = shap.TreeExplainer({"trees": shap_trees, "base_offset": model["base_margin"][k], "input_dtype": np.float32})
        sv = e.shap_values(Xt)
        cs.append(np.c_[sv, np.full(len(Xt), e.expected_value)])
        iv = e.shap_interaction_values(Xt)
        full = np.zeros((len(Xt), 6, 6))
        full[:, :5, :5] = iv
        full[:, 5, 5] = e.expected_value
        its.append(full)
    write(out, "skl_gradient_boosting_multiclass", m, Xt, m.decision_function(Xt), np.stack(cs, 1), np.stack(its, 1),
          "shap's algorithm on each class's trees (shap dict model)")

    # HistGradientBoosting: float64 inputs, learned missing directions.
    X, y = data(800, 6, 6, nan=0.08)
    m = ensemble.HistGradientBoostingRegressor(max_iter=20, max_depth=6, random_state=0).fit(X, y)
    Xt = X[:ROWS]
    c, i = shap_reference(m, Xt, 1)
    write(out, "skl_hist_gradient_boosting", m, Xt, m.predict(Xt), c, i, "shap")
    interventional(out, "skl_hist_gradient_boosting", m, m.predict, 100, 3)

    cls = np.digitize(y, [-1.0, 1.0])
    m = ensemble.HistGradientBoostingClassifier(max_iter=10, max_depth=4, random_state=0).fit(X, cls)
    c, i = shap_reference(m, Xt, 3)
    write(out, "skl_hist_multiclass", m, Xt, m.decision_function(Xt), c, i, "shap")

    # Categorical splits (integer codes, unknown and negative codes, NaN): shap reads no
    # category sets, so the reference is brute force from the estimator's own split rules.
    r = np.random.default_rng(SEED + 7)
    X, y = data(800, 5, 7, nan=0.05)
    X[:, 4] = r.integers(0, 7, size=len(X)).astype(np.float64)
    y = y + np.isin(X[:, 4], [1, 3, 5]) * 2.0
    m = ensemble.HistGradientBoostingRegressor(max_iter=8, max_depth=4, categorical_features=[4], random_state=0).fit(X, y)
    Xt = X[:ROWS].copy()
    Xt[0, 4], Xt[1, 4], Xt[2, 4], Xt[3, 4] = 9.0, np.nan, 2.0, 5.0  # an unknown category, a missing one
    model = trees_file.to_dict(m)
    c = brute_force(model, Xt)
    write(out, "skl_hist_categorical", m, Xt, m.predict(Xt), c, None, "brute force (all coalitions)")

    # IsolationForest: shap explains the mean path length E[h(x)]; score_samples = -2^(-E[h]/c(n)).
    X, _ = data(400, 5, 8)
    m = ensemble.IsolationForest(n_estimators=10, max_samples=128, random_state=0).fit(X)
    Xt = X[:ROWS]
    from sklearn.ensemble._iforest import _average_path_length
    mean_depth = -np.log2(-m.score_samples(Xt)) * _average_path_length([m._max_samples])[0]
    c, i = shap_reference(m, Xt, 1)
    write(out, "skl_isolation_forest", m, Xt, mean_depth, c, i, "shap")


if __name__ == "__main__":
    main()
