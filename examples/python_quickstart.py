"""shapfusion from Python: explain the shipped fraud model on the shipped payments, and check the
numbers against XGBoost's own pred_contribs.

    pip install ./python pandas pyarrow xgboost
    python examples/python_quickstart.py

Each step checks its own result, so a run that ends with "ok" has shown it works.
"""

from pathlib import Path

import numpy as np
import pandas as pd

import shapfusion

HERE = Path(__file__).resolve().parent
MODEL = HERE / "models" / "fraud.json"
PAYMENTS = HERE / "data" / "payments.parquet"

# 1. Prepare the model once: parse it, pick and build the engine (reused by every call).
explainer = shapfusion.Explainer(MODEL)
print(explainer)

# 2. A DataFrame in, XGBoost's pred_contribs layout out: one column per feature, bias last.
#    Columns are found by name, so the id column and the column order do not matter.
payments = pd.read_parquet(PAYMENTS)
phi = explainer.shap_values(payments)
print(f"{len(payments):,} payments -> SHAP values of shape {phi.shape}")
assert phi.shape == (len(payments), len(explainer.feature_names) + 1)

# 3. The values add up to the model's margin (log-odds of fraud), row by row.
margin = explainer.predict_margin(payments)
assert np.abs(phi.sum(axis=1) - margin).max() < 1e-9

# 4. What drives the riskiest payment?
riskiest = int(np.argmax(margin))
drivers = pd.Series(phi[riskiest, :-1], index=explainer.feature_names).sort_values(key=abs, ascending=False)
print(f"payment {payments['id'][riskiest]}: margin {margin[riskiest]:.3f}, top drivers:")
print(drivers.head(3).to_string())

# 5. Interaction values: (n, F+1, F+1), each row summing to its SHAP values.
inter = explainer.interactions(payments[:100])
assert np.abs(inter.sum(axis=2) - phi[:100]).max() < 1e-9

# 6. The same numbers as XGBoost's own pred_contribs (which computes in float32).
try:
    import xgboost as xgb
except ImportError:
    print("xgboost not installed: skipping the comparison with pred_contribs")
else:
    booster = xgb.Booster(model_file=str(MODEL))
    features = payments[explainer.feature_names]
    theirs = booster.predict(xgb.DMatrix(features), pred_contribs=True)
    error = np.abs(phi - theirs).max() / np.abs(theirs).max()
    print(f"max difference from xgboost {xgb.__version__} pred_contribs: {error:.1e} of max|phi|")
    assert error < 1e-5
    # A Booster in memory works as well as a path.
    assert np.array_equal(shapfusion.Explainer(booster).shap_values(payments), phi)

print("ok")
