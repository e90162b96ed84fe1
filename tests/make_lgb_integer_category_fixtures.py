#!/usr/bin/env python3
"""Regenerate the fixtures of LightGBM models whose categorical features were given as integer
codes (tests/fixtures/lgb_int_categories_*, lgb_mixed_categories, lgb_ordered_category).

LightGBM's Python package writes a `pandas_categorical:` line that only its own pandas input
path reads; the library loads and predicts with every one of these files, so shapfusion must
too. Each model's categorical features take integer codes here, and the references are
LightGBM's own `pred_contrib` on the data it was given:

  * lgb_int_categories_numpy:  trained on a NumPy array, `categorical_feature=[3]`, with NaN
                               (the file says `pandas_categorical:null`);
  * lgb_int_categories_pandas: a pandas frame of numbers, integer column `store` named in
                               `categorical_feature` (`pandas_categorical:[]`);
  * lgb_mixed_categories:      a pandas `category` column of strings beside an integer-coded
                               categorical one (one list for two categorical features: the lists
                               cannot be matched to features, so the model takes codes);
  * lgb_ordered_category:      an ordered pandas `category` column, which LightGBM splits as a
                               number (one list, no categorical feature).

The inputs hold codes: the integer categories as int64 (nulls for missing), the pandas
`category` columns as their pandas codes (what LightGBM itself feeds the trees).

Usage:  python tests/make_lgb_integer_category_fixtures.py [--out tests/fixtures]
Versions are pinned in tests/requirements.txt (with pandas from python/requirements-test.txt).
"""
from __future__ import annotations

import json
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fixture_common import f64_list, output_dir
from make_fixtures import ROWS, SEED

NAMES = ["lgb_int_categories_numpy", "lgb_int_categories_pandas", "lgb_mixed_categories", "lgb_ordered_category"]
PARAMS = {"verbose": -1, "num_threads": 2, "seed": SEED, "deterministic": True, "objective": "binary",
          "num_leaves": 10, "learning_rate": 0.2, "min_data_per_group": 5, "cat_smooth": 1, "max_cat_to_onehot": 2}


def frame(n: int, offset: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Three numbers and two integer-coded categories (`store` 0..11, `region` 0..3), NaN in
    `x1` and `store`; the label depends on both categories."""
    r = np.random.default_rng(SEED + offset)
    x = r.normal(size=(n, 3))
    store = r.integers(0, 12, size=n).astype(np.float64)
    region = r.integers(0, 4, size=n).astype(np.float64)
    x[r.random(n) < 0.1, 1] = np.nan
    store[r.random(n) < 0.08] = np.nan
    effect = np.where(np.isnan(store), 0.3, np.sin(np.nan_to_num(store)) * 1.5)
    logit = x[:, 0] + 0.5 * np.nan_to_num(x[:, 1]) + effect + (region == 2) * 1.0 - 0.3
    y = (r.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    df = pd.DataFrame({"x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2], "store": store, "region": region})
    return df, y


def expected(booster: lgb.Booster, data, features: list[str]) -> dict:
    contribs = booster.predict(data, pred_contrib=True)
    margin = booster.predict(data, raw_score=True)
    n = contribs.shape[0]
    return {
        "library": "lightgbm", "version": lgb.__version__, "rows": n, "groups": 1,
        "features": features, "precision": "float64",
        "contribs": f64_list(contribs), "interactions": None, "margin": f64_list(margin),
    }


def write_codes(path: Path, df: pd.DataFrame) -> None:
    """Numbers as float64 (NaN kept), integer categories as nullable int64, pandas `category`
    columns as their codes (-1, missing, as null)."""
    columns = {}
    for name, col in df.items():
        if isinstance(col.dtype, pd.CategoricalDtype):
            codes = col.cat.codes.to_numpy()
            columns[name] = pa.array(codes.astype(np.int64), mask=codes < 0, type=pa.int64())
        elif name in ("store", "region"):
            v = col.to_numpy()
            columns[name] = pa.array(np.nan_to_num(v, nan=0).astype(np.int64), mask=np.isnan(v), type=pa.int64())
        else:
            columns[name] = pa.array(col.to_numpy(), type=pa.float64())
    pq.write_table(pa.table(columns), path)


def save(out: Path, name: str, booster: lgb.Booster, test: pd.DataFrame, reference_input) -> None:
    d = out / name
    d.mkdir(parents=True)
    booster.save_model(str(d / "model.txt"))
    write_codes(d / "input.parquet", test)
    (d / "expected.json").write_text(json.dumps(expected(booster, reference_input, list(test.columns))))
    line = next(l for l in (d / "model.txt").read_text().splitlines() if l.startswith("pandas_categorical:"))
    print(f"{name}: {len(test)} rows, {line}")


def main() -> None:
    out = output_dir(NAMES)
    train, y = frame(3000, 0)
    test, _ = frame(ROWS, 1)
    features = list(train.columns)

    # NumPy: no pandas at all; categorical_feature by position.
    booster = lgb.train(PARAMS, lgb.Dataset(train.to_numpy(), y, feature_name=features, categorical_feature=[3, 4]),
                        num_boost_round=15)
    save(out, "lgb_int_categories_numpy", booster, test, test.to_numpy())

    # pandas columns of numbers, the categorical ones named: pandas_categorical is [].
    booster = lgb.train(PARAMS, lgb.Dataset(train, y, categorical_feature=["store", "region"]), num_boost_round=15)
    save(out, "lgb_int_categories_pandas", booster, test, test)

    # A `category` column of strings (region) beside the integer-coded `store`, both categorical.
    regions = ["north", "south", "east", "west"]
    def mixed(df: pd.DataFrame) -> pd.DataFrame:
        codes = df["region"].to_numpy()
        labels = np.array(regions, dtype=object)[codes.astype(int)]
        return df.assign(region=pd.Categorical(labels, categories=regions))
    booster = lgb.train(PARAMS, lgb.Dataset(mixed(train), y, categorical_feature=["store", "region"]), num_boost_round=15)
    save(out, "lgb_mixed_categories", booster, mixed(test), mixed(test))

    # An ordered `category` column: LightGBM splits it as a number (its codes), not a category.
    def ordered(df: pd.DataFrame) -> pd.DataFrame:
        return df.drop(columns="store").assign(region=pd.Categorical(df["region"].astype(int), categories=[0, 1, 2, 3], ordered=True))
    booster = lgb.train(PARAMS, lgb.Dataset(ordered(train), y), num_boost_round=15)
    save(out, "lgb_ordered_category", booster, ordered(test), ordered(test))


if __name__ == "__main__":
    main()
