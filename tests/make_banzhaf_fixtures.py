"""Banzhaf references: WOODELF's own Banzhaf values and Banzhaf interaction values for committed
fixtures' models and rows, written as `banzhaf.json` beside them: path-dependent values and
interactions, and interventional values and interactions (Banzhaf's, and Shapley's interaction
values, which shap's TreeExplainer does not compute) over the first rows (at most 100) of the
fixture's smallest committed background of at least ten rows (`background_<rows>.parquet`):
small, as WOODELF 0.4.8's
interventional *Shapley* values drift from shap's and the definition beyond 100 background rows
(benchmarks/RESULTS.md), so its larger-background paths are not taken as a reference here.

Run from the repository root with the pinned versions of tests/requirements.txt (WOODELF is
woodelf-explainer on PyPI):

    python tests/make_banzhaf_fixtures.py

WOODELF reads XGBoost and LightGBM boosters; its arithmetic keeps the models' float32
thresholds and values as they are, and it agrees with XGBoost's exact `pred_contribs` on these
models to about 3e-5 of the largest value, so the tests compare against it at 1e-4 of the
largest value and hold shapfusion to brute force over all coalitions far below that
(`crates/core/src/engine/linear.rs`).
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pyarrow.parquet as pq
import xgboost as xgb
from woodelf.explainer import WoodelfExplainer

FIXTURES = Path(__file__).parent / "fixtures"
# Missing values (xgb_missing, lgb_binary_missing), one output each: WOODELF's path-dependent
# values are per output, and these are the single-output boosters it reads.
NAMES = ["xgb_regression", "xgb_missing", "lgb_regression", "lgb_binary_missing"]
MAX_BACKGROUND_ROWS = 100


def load_model(d: Path):
    if (d / "model.json").exists():
        booster = xgb.Booster()
        booster.load_model(str(d / "model.json"))
        return booster
    return lgb.Booster(model_file=str(d / "model.txt"))


def float32_digits(values: np.ndarray) -> list[float]:
    """Values to the 9 significant digits a float32 holds (WOODELF computes in float32): the
    same numbers in half the JSON."""
    return [float(f"{v:.9g}") for v in values.ravel()]


def main() -> None:
    for name in NAMES:
        d = FIXTURES / name
        rows = pq.read_table(d / "input.parquet").to_pandas()
        explainer = WoodelfExplainer(load_model(d))
        values = np.asarray(explainer.banzhaf_values(rows, verbose=False), dtype=np.float64)
        pairs = np.asarray(explainer.banzhaf_interaction_values(rows, verbose=False), dtype=np.float64)
        n, f = values.shape
        assert pairs.shape == (n, f, f), pairs.shape
        backgrounds = sorted(d.glob("background_*.parquet"), key=lambda p: int(p.stem.split("_")[1]))
        chosen = next((p for p in backgrounds if int(p.stem.split("_")[1]) >= 10), backgrounds[-1])
        background = pq.read_table(chosen).to_pandas().iloc[:MAX_BACKGROUND_ROWS]
        over_background = WoodelfExplainer(load_model(d), data=background)
        interventional = np.asarray(over_background.banzhaf_values(rows, verbose=False), dtype=np.float64)
        interventional_pairs = np.asarray(over_background.banzhaf_interaction_values(rows, verbose=False), dtype=np.float64)
        shapley_pairs = np.asarray(over_background.shap_interaction_values(rows, verbose=False), dtype=np.float64)
        assert interventional_pairs.shape == shapley_pairs.shape == (n, f, f), (interventional_pairs.shape, shapley_pairs.shape)
        out = {
            "woodelf": version("woodelf-explainer"),
            "rows": n,
            "features": f,
            "banzhaf_values": values.ravel().tolist(),
            # The Banzhaf interaction index off the diagonal; WOODELF leaves the diagonal empty.
            "banzhaf_interactions": pairs.ravel().tolist(),
            "background": chosen.name,
            "background_rows": len(background),
            "background_banzhaf_values": interventional.ravel().tolist(),
            # Off the diagonal, as above.
            "background_banzhaf_interactions": float32_digits(interventional_pairs),
            # shap's layout: each pair's index halved between [i, j] and [j, i], the diagonal
            # each value less its row's pairs.
            "background_shapley_interactions": float32_digits(shapley_pairs),
        }
        (d / "banzhaf.json").write_text(json.dumps(out))
        print(f"{name}: {n} rows, {f} features, largest |value| {np.abs(values).max():.3g}")


if __name__ == "__main__":
    main()
