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


def coalition_values(v: np.ndarray, m: int, banzhaf: bool = False) -> np.ndarray:
    """Per output (rows of `v`'s second axis) the values of the game `v` (2^m coalitions x
    outputs, bit j of a coalition: feature j in it), Shapley's or Banzhaf's, then the bias:
    v(empty set) for Shapley's, what Banzhaf's leave of v(all) for Banzhaf's."""
    import math

    out = np.zeros((v.shape[1], m + 1))
    for i in range(m):
        for s in range(1 << m):
            if s >> i & 1:
                continue
            c = s.bit_count()
            w = 0.5 ** (m - 1) if banzhaf else math.factorial(c) * math.factorial(m - c - 1) / math.factorial(m)
            out[:, i] += w * (v[s | 1 << i] - v[s])
    out[:, m] = v[(1 << m) - 1] - out[:, :m].sum(axis=1) if banzhaf else v[0]
    return out


def logistic(margin: np.ndarray) -> np.ndarray:
    """The logistic function of a margin (a probability from log-odds)."""
    return 1.0 / (1.0 + np.exp(-margin))


def rescaled_coalition_values(games: np.ndarray, m: int, transform) -> np.ndarray:
    """shap's values of ``transform(margin)`` over a background, per output: ``games`` holds each
    background row's one-reference game (2^m coalitions x background rows x outputs, bit j of
    a coalition: feature j from the explained row), so its last coalition is f(x) and its empty
    one f(z). Each background row's Shapley values, scaled by (T(f(x)) - T(f(z))) / (f(x) -
    f(z)) (1 where equal), then the mean; the bias the background's mean T(f(z))."""
    fx, fz, n = games[-1, 0], games[0], games.shape[1]
    out = np.zeros((games.shape[2], m + 1))
    for k in range(n):
        equal = fx == fz[k]
        secant = (transform(fx) - transform(fz[k])) / np.where(equal, 1.0, fx - fz[k])
        out += np.where(equal, 1.0, secant)[:, None] * coalition_values(games[:, k, :], m) / n
    out[:, m] = transform(fz).mean(axis=0)
    return out


def cover_ratios(parent: float, left: float, right: float) -> tuple[float, float]:
    """A node's cover fractions left and right: child / parent; a node with no cover splits by its
    children's covers where they have some, else evenly (shapfusion's rule for zero-cover nodes,
    which XGBoost and LightGBM turn into NaN)."""
    if parent > 0:
        return left / parent, right / parent
    if left + right > 0:
        return left / (left + right), right / (left + right)
    return 0.5, 0.5


def brute_force_path_dependent(trees: list[dict], base: np.ndarray, features: int, X, interactions: bool = False):
    """Exact path-dependent SHAP values (and, with ``interactions``, Shapley interaction values) by
    all coalitions: ``v(S)`` is the cover-weighted conditional expectation of the model, each
    split on a feature in S following the row, any other averaging its children by
    ``cover_ratios``. For small models (2^features coalitions).

    ``trees``: dicts with ``left``/``right`` (-1 at leaves), ``feature``, ``cover``, ``value``
    (leaf values), ``output`` (the group it adds to), ``weight``, and ``goes_left(node, row)``
    (the library's own split rule). Returns ``(n, G, F+1)`` values (bias last) and, with
    ``interactions``, ``(n, G, F+1, F+1)`` in XGBoost's layout (the bias in the last cell)."""
    import itertools
    import math

    G = len(base)

    def expect(tree, x, S):
        total, stack = 0.0, [(0, 1.0)]
        while stack:
            i, w = stack.pop()
            l, r = tree["left"][i], tree["right"][i]
            if l < 0:
                total += w * tree["value"][i]
            elif tree["feature"][i] in S:
                stack.append((l if tree["goes_left"](i, x) else r, w))
            else:
                fl, fr = cover_ratios(tree["cover"][i], tree["cover"][l], tree["cover"][r])
                stack.extend([(l, w * fl), (r, w * fr)])
        return total

    n = len(X)
    values = np.zeros((n, G, features + 1))
    inter = np.zeros((n, G, features + 1, features + 1)) if interactions else None
    for row in range(n):
        x = X[row]
        v = {}
        for size in range(features + 1):
            for S in itertools.combinations(range(features), size):
                out = np.array(base, dtype=np.float64)
                for t in trees:
                    out[t["output"]] += t["weight"] * expect(t, x, set(S))
                v[frozenset(S)] = out
        for i in range(features):
            others = [j for j in range(features) if j != i]
            for size in range(features):
                w = math.factorial(size) * math.factorial(features - size - 1) / math.factorial(features)
                for S in itertools.combinations(others, size):
                    values[row, :, i] += w * (v[frozenset(S) | {i}] - v[frozenset(S)])
        values[row, :, features] = v[frozenset()]
        if interactions:
            for i in range(features):
                for j in range(features):
                    if i == j:
                        continue
                    rest = [k for k in range(features) if k not in (i, j)]
                    for size in range(features - 1):
                        w = math.factorial(size) * math.factorial(features - size - 2) / (2 * math.factorial(features - 1))
                        for S in itertools.combinations(rest, size):
                            S = frozenset(S)
                            inter[row, :, i, j] += w * (v[S | {i, j}] - v[S | {i}] - v[S | {j}] + v[S])
                inter[row, :, i, i] = values[row, :, i] - inter[row, :, i, :features].sum(axis=-1) + inter[row, :, i, i]
            inter[row, :, features, features] = v[frozenset()]
    return values, inter
