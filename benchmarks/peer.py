#!/usr/bin/env python3
"""Runs ONE peer method on one model and writes its values; the suite times it in a fresh process.

    python peer.py METHOD MODEL ROWS.npy THREADS KIND OUT.npy

METHOD: xgboost | lightgbm | shap | fasttreeshap-v1 | fasttreeshap-v2 | woodelf
KIND:   shap | interactions
Prints one JSON line: {"seconds": ..., "shape": [...]}. Values are written as float64 in
shapfusion's layout: (rows, groups, F+1) for SHAP values, (rows, groups, F+1, F+1) for
interactions, bias last.
"""
import json
import sys
import time

import numpy as np


def as_layout(values, expected, rows, features, kind):
    """shap-style outputs (features only, class last or first) -> (rows, G, F+1[, F+1])."""
    v = np.asarray(values, dtype=np.float64)
    e = np.atleast_1d(np.asarray(expected, dtype=np.float64))
    if kind == "shap":
        if v.ndim == 2:
            v = v[:, None, :]
        elif v.shape[0] != rows:  # list of classes
            v = np.moveaxis(v, 0, 1)
        elif v.shape[1] == features and v.ndim == 3:  # (rows, F, G)
            v = np.moveaxis(v, 2, 1)
        g = v.shape[1]
        out = np.zeros((rows, g, features + 1))
        out[:, :, :features] = v[:, :, :features]
        out[:, :, features] = e[:g] if e.size >= g else e[0]
        return out
    if v.ndim == 3:
        v = v[:, None]
    elif v.shape[0] != rows:
        v = np.moveaxis(v, 0, 1)
    elif v.ndim == 4 and v.shape[-1] != features:
        v = np.moveaxis(v, 3, 1)
    g = v.shape[1]
    out = np.zeros((rows, g, features + 1, features + 1))
    out[:, :, :features, :features] = v[:, :, :features, :features]
    out[:, :, features, features] = e[:g] if e.size >= g else e[0]
    return out


def main():
    method, model_path, rows_path, threads, kind, out_path = sys.argv[1:7]
    threads = int(threads)
    X = np.load(rows_path)
    rows, features = X.shape
    if method == "xgboost":
        import xgboost as xgb
        booster = xgb.Booster(model_file=model_path)
        booster.set_param({"nthread": threads})
        d = xgb.DMatrix(X, missing=np.nan, nthread=threads)
        start = time.perf_counter()
        if kind == "shap":
            v = booster.predict(d, pred_contribs=True, strict_shape=True)
        else:
            v = booster.predict(d, pred_interactions=True, strict_shape=True)
        seconds = time.perf_counter() - start
        out = np.asarray(v, dtype=np.float64)
    elif method == "lightgbm":
        import lightgbm as lgb
        booster = lgb.Booster(model_file=model_path)
        start = time.perf_counter()
        v = booster.predict(X, pred_contrib=True, num_threads=threads)
        seconds = time.perf_counter() - start
        out = np.asarray(v, dtype=np.float64).reshape(rows, -1, features + 1)
    elif method in ("shap", "fasttreeshap-v1", "fasttreeshap-v2"):
        model = load_for_shap(model_path)
        if method == "shap":
            import shap
            explainer = shap.TreeExplainer(model)
        else:
            import fasttreeshap_fixed as fasttreeshap
            explainer = fasttreeshap.TreeExplainer(model, algorithm=method.split("-")[1], n_jobs=threads)
        start = time.perf_counter()
        if kind == "shap":
            v = explainer.shap_values(X, check_additivity=False)
        else:
            v = explainer.shap_interaction_values(X)
        seconds = time.perf_counter() - start
        out = as_layout(v, explainer.expected_value, rows, features, kind)
    elif method == "woodelf":
        import woodelf
        import pandas as pd
        model = load_for_shap(model_path)
        explainer = woodelf.WoodelfExplainer(model)
        frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(features)])
        start = time.perf_counter()
        v = explainer.shap_values(frame, verbose=False) if kind == "shap" else explainer.shap_interaction_values(frame)
        seconds = time.perf_counter() - start
        out = as_layout(v, getattr(explainer, "expected_value", 0.0), rows, features, kind)
    else:
        raise SystemExit(f"unknown method {method}")
    np.save(out_path, out)
    print(json.dumps({"seconds": seconds, "shape": list(out.shape)}))


def load_for_shap(path):
    if path.endswith(".txt"):
        import lightgbm as lgb
        return lgb.Booster(model_file=path)
    import xgboost as xgb
    return xgb.Booster(model_file=path)


if __name__ == "__main__":
    main()
