#!/usr/bin/env python3
"""Regenerate the fixtures of models trained on pandas categorical columns, explained from
string and dictionary columns (tests/fixtures/*_named_categories*).

The libraries store the training categories in the model file (XGBoost 3.1+: `cats`;
LightGBM: the `pandas_categorical` line) and map a DataFrame's categories themselves. The input
is written as the user holds it: `country` a plain string column, `channel` a dictionary of
strings (a pandas categorical), `tier` the integer codes of a categorical of numbers, with nulls. The references are
the libraries' own `pred_contribs` / `pred_contrib` on the same DataFrame.

  * XGBoost refuses a category not seen in training, so its input has none (the Rust tests
    check the refusal); LightGBM treats one as missing, so its input has one ("XX").

Usage:  python tests/make_category_fixtures.py [--out tests/fixtures]
Versions are pinned in tests/requirements.txt (with pandas from benchmarks/requirements.txt).
"""
from __future__ import annotations

import json
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import xgboost as xgb

from fixture_common import f64_list, output_dir, xgboost_expected
from make_fixtures import ROWS, SEED

# Deliberately not in sorted order: a code is the position in the stored list, not in a sort.
COUNTRIES = ["US", "FR", "DE", "JP", "BR"]
CHANNELS = ["web", "store", "app"]
TIERS = [10, 20, 35]


def frame(n: int, offset: int, unseen: bool) -> tuple[pd.DataFrame, np.ndarray]:
    r = np.random.default_rng(SEED + offset)
    country = r.choice(COUNTRIES, size=n).astype(object)
    channel = r.choice(CHANNELS, size=n).astype(object)
    tier = r.choice(TIERS, size=n)
    amount = r.lognormal(3, 1, size=n)
    effect = {"US": 0.0, "FR": 1.5, "DE": -1.0, "JP": 2.5, "BR": -2.0}
    y = (np.log(amount) + np.array([effect[c] for c in country]) + (channel == "app") * 1.2
         + (tier == 20) * 0.7 + 0.4 * (channel == "store") * np.log(amount) + r.normal(scale=0.1, size=n))
    if offset:  # test rows: nulls in each categorical column, and an unseen category
        country[[0, 5]] = None
        channel[[1, 6]] = None
        if unseen:
            country[2] = "XX"
    df = pd.DataFrame({
        "amount": amount,
        "country": pd.Categorical(country, categories=COUNTRIES),
        "channel": pd.Categorical(channel, categories=CHANNELS),
        "tier": pd.Categorical(tier, categories=TIERS),
    })
    if unseen and offset:
        # Keep the unseen value: a categorical with the training categories would drop it.
        df["country"] = pd.Categorical(country, categories=COUNTRIES + ["XX"])
    return df, y


def write_input(path: Path, df: pd.DataFrame) -> None:
    """`country` as plain strings, `channel` as a dictionary (a pandas categorical), `tier` as codes."""
    table = pa.table({
        "amount": pa.array(df["amount"], type=pa.float64()),
        "country": pa.array([None if pd.isna(v) else str(v) for v in df["country"]], type=pa.string()),
        "channel": pa.array(df["channel"]),
        # Integer codes keep working: position in the training categories, null for missing.
        "tier": pa.array(df["tier"].cat.codes.astype("int8"), mask=df["tier"].isna().to_numpy(), type=pa.int8()),
    })
    pq.write_table(table, path)


def xgb_fixture(out: Path, name: str, fmt: str) -> None:
    d = out / name
    d.mkdir(parents=True)
    train, y = frame(3000, 0, unseen=False)
    test, _ = frame(ROWS, 1, unseen=False)
    params = {"nthread": 2, "seed": SEED, "objective": "reg:squarederror", "max_depth": 4, "eta": 0.3,
              "tree_method": "hist", "max_cat_to_onehot": 1}
    booster = xgb.train(params, xgb.DMatrix(train, y, enable_categorical=True), num_boost_round=12)
    booster.save_model(str(d / f"model.{fmt}"))
    write_input(d / "input.parquet", test)
    expected = xgboost_expected(xgb, booster, xgb.DMatrix(test, enable_categorical=True), list(test.columns))
    n, g = expected["rows"], expected["groups"]
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"{name}: {n} rows, {g} groups")


def lgb_fixture(out: Path, name: str) -> None:
    d = out / name
    d.mkdir(parents=True)
    train, y = frame(3000, 0, unseen=False)
    test, _ = frame(ROWS, 1, unseen=True)
    params = {"verbose": -1, "num_threads": 2, "seed": SEED, "deterministic": True, "objective": "regression",
              "num_leaves": 12, "learning_rate": 0.2, "min_data_per_group": 5, "cat_smooth": 1, "max_cat_to_onehot": 2}
    booster = lgb.train(params, lgb.Dataset(train, y), num_boost_round=12)
    booster.save_model(str(d / "model.txt"))
    contribs = booster.predict(test, pred_contrib=True)
    margin = booster.predict(test, raw_score=True)
    n, f = test.shape
    expected = {
        "library": "lightgbm", "version": lgb.__version__, "rows": n, "groups": 1,
        "features": list(test.columns), "precision": "float64",
        "contribs": f64_list(contribs), "interactions": None, "margin": f64_list(margin),
    }
    write_input(d / "input.parquet", test)
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"{name}: {n} rows")


def main() -> None:
    out = output_dir(["xgb_named_categories", "xgb_named_categories_ubj", "lgb_named_categories"])
    xgb_fixture(out, "xgb_named_categories", "json")
    xgb_fixture(out, "xgb_named_categories_ubj", "ubj")
    lgb_fixture(out, "lgb_named_categories")


if __name__ == "__main__":
    main()
