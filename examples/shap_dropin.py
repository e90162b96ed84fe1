"""Coming from shap: the same code and plots, shapfusion's engines underneath.

    pip install ./python shap xgboost scikit-learn matplotlib pandas pyarrow
    python examples/shap_dropin.py [--out beeswarm.png]

It explains the shipped fraud model on the shipped payments twice, with shap's TreeExplainer
and with shapfusion's, checks that the numbers agree, draws shap's beeswarm from shapfusion's
values, explains probabilities against a background (where shap refuses this model) and
interaction values against one (which shap does not compute), then shows `patch_shap()`: unchanged shap code running on shapfusion. Each step checks
its own result, so a run that ends with "ok" has shown it works.
"""

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import shap
import xgboost

import shapfusion

HERE = Path(__file__).resolve().parent
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--out", default="beeswarm.png", help="where the beeswarm plot is written (PNG)")
ap.add_argument("--rows", type=int, default=2000, help="payments explained")
args = ap.parse_args()

booster = xgboost.Booster()
booster.load_model(str(HERE / "models" / "fraud.json"))
payments = pd.read_parquet(HERE / "data" / "payments.parquet").iloc[: args.rows]
X = payments[booster.feature_names]

# 1. The one-line change: shapfusion.TreeExplainer where the code said shap.TreeExplainer.
start = time.perf_counter()
theirs = shap.TreeExplainer(booster)(X)
shap_s = time.perf_counter() - start
start = time.perf_counter()
ours = shapfusion.TreeExplainer(booster)(X)
ours_s = time.perf_counter() - start
print(f"shap: {shap_s:.2f} s, shapfusion: {ours_s:.2f} s for {len(X):,} rows")

# 2. The same Explanation: values (XGBoost computes in float32, so they agree to its rounding),
#    base values, rows and feature names.
error = np.abs(ours.values - theirs.values).max() / np.abs(theirs.values).max()
print(f"largest difference from shap: {error:.1e} of max |phi|")
assert ours.values.shape == theirs.values.shape and error < 1e-5
np.testing.assert_allclose(ours.base_values, theirs.base_values, rtol=1e-5)
np.testing.assert_array_equal(ours.data, theirs.data)
assert list(ours.feature_names) == list(theirs.feature_names)

# 3. shap's plots take it as they take shap's own.
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

shap.plots.beeswarm(ours, show=False)
plt.savefig(args.out, bbox_inches="tight")
plt.close("all")
assert Path(args.out).stat().st_size > 10_000
print(f"beeswarm of shapfusion's values: {args.out}")

# 4. Probabilities against a background (shap's interventional model_output="probability"):
#    shap's own TreeExplainer(model, data=bg) would keep a random 100 rows of a larger
#    background; shapfusion uses them all. shap refuses this model here (its categorical splits
#    are path-dependent only in shap); shapfusion explains it, and the values add up to
#    XGBoost's own probabilities.
background = X.iloc[-300:]
masker = shap.maskers.Independent(background, max_samples=len(background))
rows = X.iloc[:200]
ours_p = shapfusion.TreeExplainer(booster, data=masker, model_output="probability")(rows)
probability = booster.predict(xgboost.DMatrix(rows))
np.testing.assert_allclose(ours_p.values.sum(axis=1) + ours_p.base_values, probability, atol=1e-5)
try:
    shap.TreeExplainer(booster, data=masker, model_output="probability")(rows)
    print("shap explained the categorical model interventionally too")
except NotImplementedError as e:
    print(f"shap: {e}")
#    How shap defines them: against one background row, the margin's values scaled by how much
#    the probability moves per unit of margin between that row and the explained one.
one = background.iloc[:1]
margin_values = shapfusion.TreeExplainer(booster, data=one).shap_values(rows)
prob_values = shapfusion.TreeExplainer(booster, data=one, model_output="probability").shap_values(rows)
fx = booster.predict(xgboost.DMatrix(rows), output_margin=True).astype(np.float64)
fz = float(booster.predict(xgboost.DMatrix(one), output_margin=True)[0])
sigmoid = lambda m: 1.0 / (1.0 + np.exp(-m))  # noqa: E731
scale = np.where(np.abs(fx - fz) > 1e-12, (sigmoid(fx) - sigmoid(fz)) / np.where(fx == fz, 1.0, fx - fz), 1.0)
np.testing.assert_allclose(prob_values, margin_values * scale[:, None], atol=1e-5)
print(f"probability values over {len(background)} background rows add up to XGBoost's probabilities")
shap.plots.waterfall(ours_p[int(np.argmax(probability))], show=False)  # the riskiest payment
plt.close("all")

# 5. Interaction values against the background, which shap's TreeExplainer does not compute:
#    each row's matrix sums, row by row, to its interventional SHAP values.
small = X.iloc[-50:]
over_background = shapfusion.TreeExplainer(booster, data=shap.maskers.Independent(small, max_samples=len(small)))
pairs = over_background.shap_interaction_values(rows)
np.testing.assert_allclose(pairs.sum(axis=2), over_background.shap_values(rows), atol=1e-9)
try:
    # shap 0.51 prints "does not support interactions" and returns a matrix anyway.
    theirs = shap.TreeExplainer(booster, data=shap.maskers.Independent(small, max_samples=len(small))).shap_interaction_values(rows)
    adds_up = np.allclose(np.asarray(theirs).sum(axis=2), over_background.shap_values(rows), atol=1e-4)
    print(f"shap returned interventional interaction values that {'do' if adds_up else 'do not'} sum to the SHAP values")
except Exception as e:  # noqa: BLE001  (other shap versions refuse: an AssertionError or NotImplementedError)
    print(f"shap: {type(e).__name__}: {e}")
print(f"interventional interaction values of {len(rows)} rows over {len(small)} background rows sum to their SHAP values")

# 6. patch_shap(): code that calls shap keeps calling shap, and runs on shapfusion.
shapfusion.patch_shap()
try:
    explanation = shap.Explainer(booster)(X)
    assert isinstance(shap.Explainer(booster), shapfusion.TreeExplainer)
    np.testing.assert_array_equal(explanation.values, ours.values)
finally:
    shapfusion.unpatch_shap()
assert not isinstance(shap.Explainer(booster), shapfusion.TreeExplainer)
print("ok")
