#!/usr/bin/env python3
"""Build the example shipped in examples/: a fraud-scoring XGBoost model and rows to explain.

Writes examples/models/fraud.json (binary:logistic, named features, one categorical feature)
and examples/data/payments.parquet (10,000 rows with an `id` column and some missing values).
Synthetic data, fixed seed; versions pinned in tests/requirements.txt.

    python examples/make_example.py [--rows N] [--out-data PATH]
"""
import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xgboost as xgb

FEATURES = ["amount", "age", "account_days", "hour", "tx_24h", "merchant_risk", "country_code", "card_present"]


def make_rows(n: int, seed: int) -> dict:
    r = np.random.default_rng(seed)
    cols = {
        "amount": np.round(r.lognormal(3.5, 1.2, n), 2),
        "age": r.integers(18, 90, n).astype(np.float64),
        "account_days": r.integers(0, 4000, n).astype(np.float64),
        "hour": r.integers(0, 24, n).astype(np.float64),
        "tx_24h": r.poisson(2.0, n).astype(np.float64),
        "merchant_risk": r.beta(2, 8, n),
        "country_code": r.integers(0, 20, n).astype(np.float64),
        "card_present": (r.random(n) < 0.6).astype(np.float64),
    }
    # Some values are missing, as in real payment logs.
    for name, frac in [("age", 0.05), ("merchant_risk", 0.03)]:
        cols[name][r.random(n) < frac] = np.nan
    return cols


def label(cols: dict, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    risky_country = np.isin(cols["country_code"], [3, 7, 11])
    logit = (-4 + 0.004 * cols["amount"] + 1.5 * np.nan_to_num(cols["merchant_risk"], nan=0.2) * 4
             + 0.8 * risky_country + 0.5 * (cols["hour"] < 5) + 0.3 * cols["tx_24h"]
             - 0.0005 * cols["account_days"] - 1.0 * cols["card_present"])
    return (r.random(len(logit)) < 1 / (1 + np.exp(-logit))).astype(np.float64)


def main() -> None:
    here = Path(__file__).parent
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000, help="rows in the data file")
    ap.add_argument("--out-data", default=str(here / "data" / "payments.parquet"))
    ap.add_argument("--skip-model", action="store_true", help="only write data (e.g. a 1M-row file)")
    args = ap.parse_args()

    if not args.skip_model:
        train = make_rows(50_000, 1)
        X = np.column_stack([train[f] for f in FEATURES])
        d = xgb.DMatrix(X, label(train, 2), feature_names=FEATURES,
                        feature_types=["q", "q", "q", "q", "q", "q", "c", "q"], enable_categorical=True)
        booster = xgb.train({"objective": "binary:logistic", "max_depth": 6, "eta": 0.1, "nthread": 2,
                             "tree_method": "hist", "seed": 3}, d, num_boost_round=100)
        (here / "models").mkdir(exist_ok=True)
        booster.save_model(str(here / "models" / "fraud.json"))

    rows = make_rows(args.rows, 4)
    table = pa.table({"id": pa.array(np.arange(args.rows), pa.int64()),
                      **{f: pa.array(rows[f], from_pandas=True) for f in FEATURES}})
    Path(args.out_data).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, args.out_data, row_group_size=131_072)
    print(f"wrote {args.out_data} ({args.rows} rows)")


if __name__ == "__main__":
    main()
