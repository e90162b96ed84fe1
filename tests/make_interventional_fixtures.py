#!/usr/bin/env python3
"""Interventional SHAP references for the committed fixtures, computed by shap itself.

For each fixture named below, writes beside its model and input.parquet:

  background_<B>.parquet        B background rows (the fixture's input rows, each column shuffled
                                independently and repeated up to B rows: the input's marginals,
                                new combinations; NaNs and categories preserved)
  interventional_<B>.json       the library's mean margin over the background (the bias), and
                                shap.TreeExplainer(model, data=Independent(bg, max_samples=B),
                                feature_perturbation="interventional", model_output="raw")'s
                                SHAP values (rows x groups x features), where shap can explain
                                the model (see SHAP_UNUSABLE)

shap's masker keeps a random 100 rows of a larger background unless max_samples is the whole
set, so it is passed explicitly. Versions are pinned in tests/requirements.txt.

Usage:  python tests/make_interventional_fixtures.py [--fixtures tests/fixtures]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import shap
import xgboost as xgb
from fixture_common import background_table

SEED = 20261123

# fixture -> background sizes: regression, binary with NaN, multiclass, a deep model (depth 10+)
# and LightGBM, with backgrounds from 1 row to 1,000: shap's values are the reference.
CASES = {
    "xgb_regression": [1, 10, 1000],
    "xgb_missing": [100],
    "xgb_binary_ubj": [25],
    "xgb_multiclass": [50],
    "xgb_deep": [200],
    "lgb_regression": [1000],
    "lgb_binary_missing": [30],
}

# Models shap 0.51 cannot explain with a background: a background and the library's own mean
# margin over it (the bias) are written, and tests/interventional.rs checks them by brute force
# over all coalitions (model predictions only) or by additivity against the library's margins.
SHAP_UNUSABLE = {
    "xgb_categorical": (100, "shap refuses XGBoost categorical splits with a background"),
    "lgb_categorical": (100, "shap does not read LightGBM categorical splits (its values fail its own additivity check)"),
    "lgb_multiclass": (40, "shap returns one output instead of three for a LightGBM multiclass model"),
    "lgb_zero_missing": (20, "shap ignores LightGBM's zero-as-missing (its predictions differ from LightGBM's by up to 17)"),
    "xgb_dart": (10, "shap ignores DART tree weights (its predictions differ from XGBoost's by up to 2.8)"),
}


def library_margin(booster, library: str, table: pa.Table) -> np.ndarray:
    """The library's own margins, rows x groups (categories as their integer codes)."""
    X = table.to_pandas().to_numpy(dtype=np.float64)
    if library == "xgboost":
        types = booster.feature_types
        d = xgb.DMatrix(X, missing=np.nan, feature_names=booster.feature_names, feature_types=types,
                        enable_categorical=types is not None and "c" in types)
        m = booster.predict(d, output_margin=True, strict_shape=True)
    else:
        m = booster.predict(X, raw_score=True)
    return np.asarray(m, dtype=np.float64).reshape(len(X), -1)


def load_model(d: Path):
    for name in ("model.json", "model.ubj"):
        if (d / name).exists():
            booster = xgb.Booster()
            booster.load_model(str(d / name))
            return booster, "xgboost"
    return lgb.Booster(model_file=str(d / "model.txt")), "lightgbm"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=str(Path(__file__).parent / "fixtures"))
    args = ap.parse_args()
    root = Path(args.fixtures)
    rng = np.random.default_rng(SEED)
    jobs = [(name, size, None) for name, sizes in CASES.items() for size in sizes]
    jobs += [(name, size, why) for name, (size, why) in SHAP_UNUSABLE.items()]
    for name, size, unusable in jobs:
        d = root / name
        booster, library = load_model(d)
        rows = pq.read_table(d / "input.parquet")
        bg_table = background_table(rows, size, rng)
        pq.write_table(bg_table, d / f"background_{size}.parquet")
        mean_margin = library_margin(booster, library, bg_table).mean(axis=0)
        out = {"background_rows": size, "library": library, "library_mean_margin": [float(v) for v in mean_margin]}
        if unusable is None:
            X = rows.to_pandas().to_numpy(dtype=np.float64)
            bg = bg_table.to_pandas().to_numpy(dtype=np.float64)
            masker = shap.maskers.Independent(bg, max_samples=len(bg))
            explainer = shap.TreeExplainer(booster, data=masker, feature_perturbation="interventional", model_output="raw")
            values = np.asarray(explainer.shap_values(X, check_additivity=True), dtype=np.float64)
            groups = mean_margin.size
            n, f = X.shape
            # shap returns (n, f) for one output and (n, f, groups) for several.
            values = values.reshape(n, f, groups).transpose(0, 2, 1) if groups > 1 else values.reshape(n, 1, f)
            out.update({"shap": shap.__version__, "rows": n, "groups": groups, "features": f, "values": [float(v) for v in values.ravel()],
                        "shap_expected_value": [float(v) for v in np.atleast_1d(explainer.expected_value)]})
        else:
            out["shap_unusable"] = unusable
        (d / f"interventional_{size}.json").write_text(json.dumps(out))
        print(f"{name}: background {size}" + (f" (no shap reference: {unusable})" if unusable else ""))


if __name__ == "__main__":
    main()
