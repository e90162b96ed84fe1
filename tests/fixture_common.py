"""What the fixture scripts share: number formats and XGBoost's reference outputs in the layout
of expected.json. Imports numpy only, so every script's environment can use it (the vector-leaf
script runs alone on Python 3.12 with XGBoost 3.4)."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def output_dir(names: list[str]) -> Path:
    """The fixtures directory (`--out`, default tests/fixtures), with the fixtures `names` removed
    so they are written afresh; other fixtures beside them are left alone."""
    import argparse
    import __main__
    ap = argparse.ArgumentParser(description=__main__.__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).parent / "fixtures"))
    out = Path(ap.parse_args().out)
    for name in names:
        shutil.rmtree(out / name, ignore_errors=True)
    return out



def f32_list(a: np.ndarray) -> list[float]:
    # 9 significant digits round-trip a float32 exactly and keep the files small.
    return [float(f"{v:.9g}") for v in np.asarray(a, dtype=np.float32).ravel()]


def f64_list(a: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(a, dtype=np.float64).ravel()]


def xgboost_expected(xgb, booster, dtest, features: list[str]) -> dict:
    """XGBoost's own SHAP values, interactions and margins for `dtest`, as expected.json holds them."""
    contribs = booster.predict(dtest, pred_contribs=True, strict_shape=True)
    inter = booster.predict(dtest, pred_interactions=True, strict_shape=True)
    margin = booster.predict(dtest, output_margin=True, strict_shape=True)
    n, g = contribs.shape[0], contribs.shape[1]
    return {
        "library": "xgboost", "version": xgb.__version__, "rows": n, "groups": g,
        "features": features, "precision": "float32",
        "contribs": f32_list(contribs), "interactions": f32_list(inter),
        "margin": f32_list(margin.reshape(n, -1)[:, :g]),
    }


def write_input(path: Path, X: np.ndarray, names: list[str]) -> None:
    """Write rows as float64 Parquet; every other missing value is a null, the rest stay NaN."""
    cols = []
    for j in range(X.shape[1]):
        col = X[:, j].astype(np.float64)
        nan_rows = np.flatnonzero(np.isnan(col))
        mask = np.zeros(len(col), dtype=bool)
        mask[nan_rows[::2]] = True
        cols.append(pa.array(col, mask=mask, type=pa.float64()))
    pq.write_table(pa.table(cols, names=names), path)


def regression_rows(n: int, f: int, seed: int, nan: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Rows of normal features (f >= 4) and a target with a main effect, a non-linear one and an
    interaction, with a fraction `nan` of the values missing: the data of the scikit-learn and
    CatBoost fixtures."""
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, f))
    y = X[:, 0] * 1.5 + np.sin(2 * X[:, 1]) + X[:, 2] * X[:, 3] + 0.3 * r.normal(size=n)
    if nan:
        X[r.random(size=X.shape) < nan] = np.nan
    return X, y


def background_table(table: pa.Table, rows: int, rng: np.random.Generator) -> pa.Table:
    """Background rows for interventional SHAP: each column of `table` shuffled on its own, the
    whole repeated to `rows` rows (the input's marginals in new combinations)."""
    n = table.num_rows
    cols = []
    for col in table.columns:
        picks = np.concatenate([rng.permutation(n) for _ in range(rows // n + 1)])[:rows]
        cols.append(col.take(pa.array(picks)))
    return pa.table(cols, names=table.column_names)
