#!/usr/bin/env python3
"""LightGBM linear trees (`linear_tree=True`): models and references by brute force over every
coalition, each hybrid row predicted by LightGBM itself.

Neither LightGBM (`pred_contrib` refuses linear trees) nor shap explains these models, so the
references are the definition: for each explained row x and coalition S, the game
v(S) = mean over the background rows z of LightGBM's raw score of the hybrid (x on S, z off S).
From it, per fixture under tests/fixtures/linear/<name>/:

  model.txt                   the LightGBM model
  input.parquet               the explained rows (NaNs among them: a NaN in a leaf's linear
                              features makes LightGBM give the leaf's constant value)
  background.parquet          the background rows (NaNs among them too)
  expected.json               LightGBM's raw scores of the explained rows ("margin"), and of the
                              game: Shapley values ("shapley", rows x groups x (features + 1),
                              the bias v(empty set) last), Shapley interaction values
                              ("shapley_interactions", rows x groups x (F+1) x (F+1) in
                              XGBoost's pred_interactions layout: half the interaction index off
                              the diagonal, each value less its row's pairs on it, v(empty set)
                              in the corner), Banzhaf values and Banzhaf interaction values
                              ("banzhaf", "banzhaf_interactions": the index whole off the
                              diagonal, the bias entry the margin less everything else)

and for the binary classifier, shap's values of a transformed output T over a background (its
`model_output="probability"` and `"log_loss"`): for each background row z, the Shapley values
of the one-reference game v_z(S) = raw score of (x on S, z off S), scaled by
(T(f(x)) - T(f(z))) / (f(x) - f(z)) (1 where the scores are equal), then the mean over the
background, the bias the background's mean T(f(z)): "probability" (T the logistic function)
and "log_loss" (T the logistic loss against each explained row's label in "labels").

Versions are pinned in tests/requirements.txt.

Usage:  python tests/make_linear_tree_fixtures.py [--out tests/fixtures/linear]
"""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fixture_common import coalition_values, f64_list, logistic, output_dir, rescaled_coalition_values, write_input

SEED = 20261206
NAMES = ["lgb_linear_regression", "lgb_linear_multiclass", "lgb_linear_binary"]


def with_nans(X: np.ndarray, rng: np.random.Generator, share: float) -> np.ndarray:
    X = X.copy()
    X[rng.random(X.shape) < share] = np.nan
    return X


def hybrid_scores(booster: lgb.Booster, x: np.ndarray, background: np.ndarray, groups: int) -> np.ndarray:
    """LightGBM's raw scores of the hybrids (x on S, each background row off S): every coalition
    S (bit j of S: feature j from x) x background rows x groups."""
    m = x.size
    coalitions = np.arange(1 << m)
    take_x = (coalitions[:, None] >> np.arange(m)[None, :]) & 1 == 1
    hybrids = np.where(take_x[:, None, :], x[None, None, :], background[None, :, :]).reshape(-1, m)
    return np.asarray(booster.predict(hybrids, raw_score=True), dtype=np.float64).reshape(1 << m, len(background), groups)


def interactions(v: np.ndarray, m: int, banzhaf: bool, phi: np.ndarray) -> np.ndarray:
    """Per group an (m+1) x (m+1) matrix in XGBoost's pred_interactions layout."""
    out = np.zeros((v.shape[1], m + 1, m + 1))
    for i, j in itertools.combinations(range(m), 2):
        total = np.zeros(v.shape[1])
        for s in range(1 << m):
            if s >> i & 1 or s >> j & 1:
                continue
            c = s.bit_count()
            if banzhaf:
                w = 0.5 ** (m - 2)
            else:
                # Half the Shapley interaction index, as shap and XGBoost split it between (i, j) and (j, i).
                w = math.factorial(c) * math.factorial(m - c - 2) / (2 * math.factorial(m - 1))
            total += w * (v[s | 1 << i | 1 << j] - v[s | 1 << i] - v[s | 1 << j] + v[s])
        out[:, i, j] = out[:, j, i] = total
    for i in range(m):
        out[:, i, i] = phi[:, i] - (out[:, i, :m].sum(axis=1) - out[:, i, i])
    full = v[(1 << m) - 1]
    out[:, m, m] = full - (out.reshape(v.shape[1], -1).sum(axis=1) - out[:, m, m]) if banzhaf else v[0]
    return out


def logistic_loss(m: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, m) - y * m


def write(root: Path, name: str, booster: lgb.Booster, X: np.ndarray, background: np.ndarray, features: list[str],
          labels: np.ndarray | None = None) -> None:
    d = root / name
    d.mkdir(parents=True)
    booster.save_model(str(d / "model.txt"))
    write_input(d / "input.parquet", X, features)
    pq.write_table(pa.table({f: pa.array(background[:, j], type=pa.float64()) for j, f in enumerate(features)}), d / "background.parquet")
    margin = np.asarray(booster.predict(X, raw_score=True), dtype=np.float64).reshape(len(X), -1)
    groups, m = margin.shape[1], X.shape[1]
    expected = {"library": "lightgbm", "version": lgb.__version__, "rows": len(X), "groups": groups, "features": features,
                "precision": "float64", "margin": f64_list(margin), "background_rows": len(background)}
    for index in ("shapley", "banzhaf"):
        phis, matrices = [], []
        for x in X:
            v = hybrid_scores(booster, x, background, groups).mean(axis=1)
            phi = coalition_values(v, m, index == "banzhaf")
            phis.append(phi)
            matrices.append(interactions(v, m, index == "banzhaf", phi))
        expected[index] = f64_list(np.array(phis))
        expected[f"{index}_interactions"] = f64_list(np.array(matrices))
    if labels is not None:
        expected["labels"] = f64_list(labels)
        for key, transform in (("probability", lambda margin, label: logistic(margin)), ("log_loss", logistic_loss)):
            values = np.array([rescaled_coalition_values(hybrid_scores(booster, x, background, groups), m,
                                                         lambda margins, y=y, transform=transform: transform(margins, y))
                               for x, y in zip(X, labels, strict=True)])
            # Each row adds up to its transformed score.
            assert np.allclose(values.sum(axis=2)[:, 0], transform(margin[:, 0], labels), rtol=1e-9, atol=1e-12), (name, key)
            expected[key] = f64_list(values)
    (d / "expected.json").write_text(json.dumps(expected))
    # The definition adds up: Shapley values to each row's score.
    phis = np.array(expected["shapley"]).reshape(len(X), groups, m + 1)
    assert np.allclose(phis.sum(axis=2), margin, rtol=1e-9, atol=1e-9), name
    print(f"{name}: {booster.num_trees()} trees, {len(X)} rows, background {len(background)}")


def main() -> None:
    root = output_dir(NAMES)
    rng = np.random.default_rng(SEED)

    # Regression, 6 features, missing values in training, explained and background rows.
    m = 6
    X = rng.normal(size=(600, m))
    y = X[:, 0] * 2 + np.where(X[:, 1] > 0, X[:, 2], -X[:, 3]) + 0.5 * X[:, 4] * X[:, 5] + rng.normal(scale=0.1, size=600)
    X = with_nans(X, rng, 0.05)
    params = {"objective": "regression", "linear_tree": True, "linear_lambda": 0.01, "num_leaves": 8, "learning_rate": 0.2,
              "min_data_in_leaf": 20, "verbose": -1, "seed": 1, "deterministic": True, "num_threads": 1}
    features = [f"x{j}" for j in range(m)]
    booster = lgb.train(params, lgb.Dataset(X, y, feature_name=features), num_boost_round=12)
    explained = with_nans(rng.normal(size=(12, m)), rng, 0.15)
    background = with_nans(rng.normal(size=(16, m)), rng, 0.1)
    write(root, NAMES[0], booster, explained, background, features)

    # Multiclass, 5 features, one of them categorical (split on, never in a leaf's linear model).
    m = 5
    X = rng.normal(size=(900, m))
    X[:, 4] = rng.integers(0, 4, size=900)
    logits = np.stack([X[:, 0] + (X[:, 4] == 1), X[:, 1] - X[:, 2] * (X[:, 4] > 1), 0.5 * X[:, 3]], axis=1)
    y = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)
    X[:, :4] = with_nans(X[:, :4], rng, 0.04)
    params = {"objective": "multiclass", "num_class": 3, "linear_tree": True, "num_leaves": 6, "learning_rate": 0.3,
              "min_data_in_leaf": 30, "verbose": -1, "seed": 2, "deterministic": True, "num_threads": 1}
    features = [f"x{j}" for j in range(4)] + ["kind"]
    booster = lgb.train(params, lgb.Dataset(X, y, feature_name=features, categorical_feature=[4]), num_boost_round=6)
    explained = rng.normal(size=(10, m))
    explained[:, 4] = rng.integers(0, 4, size=10)
    explained[:, :4] = with_nans(explained[:, :4], rng, 0.15)
    background = rng.normal(size=(12, m))
    background[:, 4] = rng.integers(0, 4, size=12)
    background[:, :4] = with_nans(background[:, :4], rng, 0.1)
    write(root, NAMES[1], booster, explained, background, features)

    # Binary classifier, 5 features, for the probability and the loss (shap's rescaled values).
    m = 5
    X = rng.normal(size=(700, m))
    logit = 1.5 * X[:, 0] - X[:, 1] * (X[:, 2] > 0) + 0.7 * X[:, 3] * X[:, 4]
    y = (rng.random(700) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    X = with_nans(X, rng, 0.05)
    params = {"objective": "binary", "linear_tree": True, "linear_lambda": 0.1, "num_leaves": 6, "learning_rate": 0.3,
              "min_data_in_leaf": 25, "verbose": -1, "seed": 3, "deterministic": True, "num_threads": 1}
    features = [f"x{j}" for j in range(m)]
    booster = lgb.train(params, lgb.Dataset(X, y, feature_name=features), num_boost_round=8)
    explained = with_nans(rng.normal(size=(10, m)), rng, 0.15)
    labels = (rng.random(10) < 0.5).astype(np.float64)
    background = with_nans(rng.normal(size=(14, m)), rng, 0.1)
    write(root, NAMES[2], booster, explained, background, features, labels)


if __name__ == "__main__":
    main()
