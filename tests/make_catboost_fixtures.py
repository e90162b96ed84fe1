#!/usr/bin/env python3
"""Regenerate the CatBoost fixtures (tests/fixtures/cb_*).

Each fixture holds
  model.json       the model as CatBoost saves it: ``model.save_model(path, format="json")``
  model.cbm        the same model in CatBoost's binary format: ``model.save_model(path)``
  input.parquet    the rows to explain (NaN where the model was trained with missing values)
  expected.json    CatBoost's own outputs: ``get_feature_importance(type="ShapValues")`` and
                   ``"ShapInteractionValues"`` (float64; the bias row and column in XGBoost's
                   layout: the expected value in the bias cell, zeros elsewhere), and the raw
                   margin from
                   ``predict(prediction_type="RawFormulaVal")``

Models grown with ``grow_policy="Depthwise"`` or ``"Lossguide"`` (non-symmetric trees; the
``cb_depthwise_*`` and ``cb_lossguide_*`` fixtures) are where CatBoost's own ShapValues do not add
up to its own predictions. Their ``contribs`` and ``interactions`` are brute force over all
coalitions instead (``fixture_common.brute_force_path_dependent``, from the trees of the saved
JSON with CatBoost's split rules), checked to add up to ``RawFormulaVal``; CatBoost's own values
are kept as ``library_contribs`` with ``library_error`` (their largest distance from the exact
values over the largest |value|) and ``library_additivity_error``.

Usage:  python tests/make_catboost_fixtures.py [--out tests/fixtures]
Versions are pinned in tests/requirements.txt.
"""
from __future__ import annotations

import json
import math
import shutil

import catboost
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from fixture_common import brute_force_path_dependent, f64_list, output_dir, regression_rows, write_input

SEED = 20261126
ROWS = 30


def data(n: int, f: int, seed: int, nan: float = 0.0):
    return regression_rows(n, f, SEED + seed, nan)


def save(model, d) -> None:
    """The model in both of CatBoost's formats shapfusion reads: its JSON and its own binary
    format (``.cbm``, what ``save_model`` writes by default), saved from the trained model."""
    model.save_model(str(d / "model.json"), format="json")
    model.save_model(str(d / "model.cbm"))


def write(out, name: str, model, X, interactions: bool = True, cat_features=None) -> None:
    d = out / name
    d.mkdir(parents=True)
    save(model, d)
    if cat_features:
        names = list(X.columns)
        pq.write_table(pa.Table.from_pandas(X, preserve_index=False), d / "input.parquet")
    else:
        names = [f"f{j}" for j in range(X.shape[1])]
        write_input(d / "input.parquet", X, names)
    pool = catboost.Pool(X, cat_features=cat_features)
    n, f = X.shape
    sv = np.asarray(model.get_feature_importance(pool, type="ShapValues"), dtype=np.float64).reshape(n, -1, f + 1)
    groups = sv.shape[1]
    margin = np.asarray(model.predict(pool, prediction_type="RawFormulaVal"), dtype=np.float64).reshape(n, groups)
    inter = None
    if interactions:
        iv = np.asarray(model.get_feature_importance(pool, type="ShapInteractionValues"), dtype=np.float64)
        inter = iv.reshape(n, groups, f + 1, f + 1).copy()
        # CatBoost's bias row and column vary (0, or on models with categorical features the
        # expected value in every cell); XGBoost's layout, which shapfusion writes, holds the
        # expected value in the bias cell only, so every row of the matrix sums to that row's
        # SHAP values. The feature-by-feature block is CatBoost's as it computed it.
        inter[:, :, f, :] = 0.0
        inter[:, :, :, f] = 0.0
        inter[:, :, f, f] = sv[:, :, f]
    expected = {
        "library": "catboost", "version": catboost.__version__, "reference": "catboost get_feature_importance",
        "rows": n, "groups": groups, "features": names, "precision": "float64",
        "contribs": f64_list(sv), "interactions": None if inter is None else f64_list(inter), "margin": f64_list(margin),
    }
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"{name}: {model.tree_count_} trees, additivity of CatBoost's values {np.abs(sv.sum(axis=2) - margin).max():.2e}")


def category_hashes(columns: dict) -> dict:
    """CatBoost's hash of each category value, per column (``{column: [values]}``), from its own
    Python export of a throwaway model, which holds the value → hash table of a pool."""
    import re
    import tempfile

    # Columns of different lengths are repeated up to the longest (a frame's columns are equal).
    longest = max(len(vals) for vals in columns.values())
    frame = pd.DataFrame({c: [str(vals[i % len(vals)]) for i in range(longest)] for c, vals in columns.items()})
    frame["_x"] = np.arange(len(frame), dtype=np.float64)
    pool = catboost.Pool(frame, label=np.arange(len(frame)) % 2, cat_features=list(columns))
    m = catboost.CatBoostRegressor(iterations=1, depth=1, one_hot_max_size=255, verbose=0, allow_writing_files=False).fit(pool)
    with tempfile.TemporaryDirectory() as tmp:
        m.save_model(f"{tmp}/m.py", format="python", pool=pool)
        text = open(f"{tmp}/m.py").read()
    table = text[text.index("cat_features_hashes = {"):]
    table = table[: table.index("}") + 1]
    return {k: int(v) & 0xFFFFFFFF for k, v in re.findall(r'"((?:[^"\\]|\\.)*)": (-?\d+)', table)}


# CatBoost's multiplier in its hash of a feature combination (its Python export's calc_hash).
CTR_HASH_MULTIPLIER = 0x4906BA494954CB65


def ctr_splits(model_json: dict):
    """CatBoost's CTR splits of one categorical feature, from the JSON as CatBoost's own Python
    export computes them: returns ``(by_split_index, value)``, where ``by_split_index`` maps a
    split's ``split_index`` to its CTR (a ``features_info.ctrs`` entry) and border, and
    ``value(ctr, category_hash)`` is the CTR of a category (hash None: missing), in float32.
    CatBoost numbers binary features float borders first, then one-hot values, then CTR borders."""
    info = model_json["features_info"]
    index = sum(len(f.get("borders", [])) for f in info.get("float_features", [])) + sum(len(f.get("values", [])) for f in info.get("categorical_features", []))
    by_split_index = {}
    for ctr in info.get("ctrs", []):
        for border in ctr["borders"]:
            by_split_index[index] = (ctr, border)
            index += 1
    tables = {}
    for identifier, t in model_json.get("ctr_data", {}).items():
        stride, flat = t["hash_stride"], t["hash_map"]
        tables[identifier] = ({int(flat[k]): flat[k + 1:k + stride] for k in range(0, len(flat), stride)}, t["counter_denominator"])
    mask = (1 << 64) - 1

    def value(ctr: dict, category_hash):
        table, denominator = tables[ctr["identifier"]]
        counts = None
        if category_hash is not None:
            signed = category_hash - (1 << 32) if category_hash >= 1 << 31 else category_hash
            counts = table.get(CTR_HASH_MULTIPLIER * ((CTR_HASH_MULTIPLIER * signed) & mask) & mask)
        kind, target = ctr["ctr_type"], ctr["target_border_idx"]
        if counts is None:
            good, total = 0, 0
        elif kind in ("Counter", "FeatureFreq"):
            good, total = counts[0], denominator
        elif kind == "Buckets":
            good, total = counts[target], sum(counts)
        elif len(counts) == 2:
            good, total = counts[1], sum(counts)
        else:
            good, total = sum(counts[target + 1:]), sum(counts)
        f32 = np.float32
        share = (f32(good) + f32(ctr["prior_numerator"])) / (f32(total) + f32(ctr["prior_denomerator"]))
        return (share + f32(ctr["shift"])) * f32(ctr["scale"])

    return by_split_index, value


def non_symmetric_trees(model_json: dict, hashes: dict) -> tuple[list, np.ndarray, int]:
    """The trees of a non-symmetric CatBoost JSON for ``brute_force_path_dependent``, with
    CatBoost's split rules: float features compare in float32, left iff ``x <= border``, NaN by
    the feature's ``nan_value_treatment`` (AsTrue: right); a one-hot split sends the value whose
    hash is the split's right, anything else left; a CTR split of one categorical feature sends a
    category right when its CTR is above the border (``ctr_splits``). Returns (trees, base
    margin, features)."""
    info = model_json["features_info"]
    floats = {f["feature_index"]: (f["flat_feature_index"], f.get("nan_value_treatment") == "AsTrue") for f in info.get("float_features", [])}
    cats = {f["feature_index"]: f["flat_feature_index"] for f in info.get("categorical_features", [])}
    ctr_by_split_index, ctr_value = ctr_splits(model_json)
    features = max([flat for flat, _ in floats.values()] + list(cats.values())) + 1
    scale, bias = model_json["scale_and_bias"]
    bias = np.atleast_1d(np.asarray(bias, dtype=np.float64))
    trees = []
    for tree in model_json["trees"]:
        left, right, feature, cover, values, tests = [], [], [], [], [], []
        stack = [(tree, None)]
        while stack:
            node, parent = stack.pop()
            i = len(left)
            if parent is not None:
                (left if parent[1] else right)[parent[0]] = i
            left.append(-1), right.append(-1), feature.append(-1), cover.append(0.0), values.append(None), tests.append(None)
            if "split" in node:
                split = node["split"]
                if split["split_type"] == "FloatFeature":
                    flat, nan_right = floats[split["float_feature_index"]]
                    border = split["border"]
                    tests[i] = (lambda x, flat=flat, border=border, nan_right=nan_right:
                                (not nan_right) if math.isnan(x[flat]) else float(np.float32(x[flat])) <= border)
                elif split["split_type"] == "OnlineCtr":
                    ctr, border = ctr_by_split_index[split["split_index"]]
                    assert border == split["border"] and len(ctr["elements"]) == 1, split
                    flat = cats[ctr["elements"][0]["cat_feature_index"]]
                    tests[i] = (lambda x, flat=flat, ctr=ctr, border=np.float32(border):
                                not ctr_value(ctr, None if x[flat] is None else hashes[str(x[flat])]) > border)
                else:
                    flat = cats[split["cat_feature_index"]]
                    want = split["value"] & 0xFFFFFFFF
                    tests[i] = (lambda x, flat=flat, want=want: x[flat] is None or hashes.get(str(x[flat])) != want)
                feature[i] = flat
                stack.extend([(node["right"], (i, False)), (node["left"], (i, True))])
            else:
                cover[i] = float(node["weight"])
                values[i] = np.atleast_1d(np.asarray(node["value"], dtype=np.float64))
        for i in reversed(range(len(left))):
            if left[i] >= 0:
                cover[i] = cover[left[i]] + cover[right[i]]
        dims = len(next(v for v in values if v is not None))
        for g in range(dims):
            trees.append({"left": left, "right": right, "feature": feature, "cover": cover, "output": g, "weight": float(scale),
                          "value": [0.0 if v is None else float(v[g]) for v in values],
                          "goes_left": lambda i, x, tests=tests: tests[i](x)})
    base = bias if len(bias) == dims else np.full(dims, bias[0] if len(bias) else 0.0)
    return trees, base, features


def write_non_symmetric(out, name: str, model, X, cat_features=None) -> None:
    """A non-symmetric model's fixture: brute-force values, CatBoost's own beside them."""
    d = out / name
    d.mkdir(parents=True)
    save(model, d)
    model_json = json.loads((d / "model.json").read_text())
    if cat_features:
        names = list(X.columns)
        pq.write_table(pa.Table.from_pandas(X, preserve_index=False), d / "input.parquet")
        hashes = category_hashes({c: sorted({str(v) for v in X[c]}) for c in cat_features})
        rows = [[None if (isinstance(v, float) and math.isnan(v) and c in cat_features) else v for c, v in zip(names, r)] for r in X.itertuples(index=False)]
    else:
        names = [f"f{j}" for j in range(X.shape[1])]
        write_input(d / "input.parquet", X, names)
        hashes, rows = {}, [list(r) for r in np.asarray(X, dtype=np.float64)]
    pool = catboost.Pool(X, cat_features=cat_features)
    n, f = X.shape
    margin = np.asarray(model.predict(pool, prediction_type="RawFormulaVal"), dtype=np.float64).reshape(n, -1)
    trees, base, features = non_symmetric_trees(model_json, hashes)
    assert features == f, (features, f)
    contribs, inter = brute_force_path_dependent(trees, base, f, rows, interactions=True)
    additivity = np.abs(contribs.sum(axis=2) - margin).max()
    assert additivity < 1e-9, f"{name}: brute force misses CatBoost's RawFormulaVal by {additivity:.2e}"
    library = np.asarray(model.get_feature_importance(pool, type="ShapValues"), dtype=np.float64).reshape(n, -1, f + 1)
    library_error = float(np.abs(library - contribs).max() / np.abs(contribs[:, :, :f]).max())
    library_additivity = float(np.abs(library.sum(axis=2) - margin).max())
    expected = {
        "library": "catboost", "version": catboost.__version__, "grow_policy": model.get_all_params()["grow_policy"],
        "reference": "brute force (all coalitions) over the saved trees; CatBoost's ShapValues are off on non-symmetric trees",
        "rows": n, "groups": contribs.shape[1], "features": names, "precision": "float64",
        "contribs": f64_list(contribs), "interactions": f64_list(inter), "margin": f64_list(margin),
        "library_contribs": f64_list(library), "library_error": library_error, "library_additivity_error": library_additivity,
    }
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"{name}: {model.tree_count_} trees; CatBoost's ShapValues off by {library_error:.3g} of max |phi|, "
          f"their sum off RawFormulaVal by {library_additivity:.3g}")


def symmetric_trees_by_players(model_json: dict, leaf_indexes: np.ndarray):
    """The oblivious trees of a CatBoost JSON for ``brute_force_path_dependent``, each split
    credited to its *player* as CatBoost's ShapValues credit it: a float or one-hot split to its
    feature, a CTR split to the categorical features of its CTR's projection (one feature, or a
    combination of several: a player of its own). Rows are given by their index; a split's
    direction is CatBoost's own, read from ``calc_leaf_indexes`` (bit d of a row's leaf index is
    set where it goes right at the tree's split d). The root tests the tree's last split, as
    CatBoost weighs them. Returns (trees, base margin, players, shared), ``shared`` the
    features of each player after the features."""
    info = model_json["features_info"]
    floats = {f["feature_index"]: f["flat_feature_index"] for f in info.get("float_features", [])}
    cats = {f["feature_index"]: f["flat_feature_index"] for f in info.get("categorical_features", [])}
    features = max(list(floats.values()) + list(cats.values())) + 1
    ctr_by_split_index, _ = ctr_splits(model_json)
    shared: list[tuple] = []

    def player(split: dict) -> int:
        if split["split_type"] == "FloatFeature":
            return floats[split["float_feature_index"]]
        if split["split_type"] == "OneHotFeature":
            return cats[split["cat_feature_index"]]
        ctr, border = ctr_by_split_index[split["split_index"]]
        assert np.float32(border) == np.float32(split["border"]), (split, border)
        members = tuple(sorted({cats[e["cat_feature_index"]] for e in ctr["elements"] if e["combination_element"] == "cat_feature_value"}))
        if len(members) == 1:
            return members[0]
        if members not in shared:
            shared.append(members)
        return features + shared.index(members)

    scale, bias = model_json["scale_and_bias"]
    bias = np.atleast_1d(np.asarray(bias, dtype=np.float64))
    trees = []
    for t, tree in enumerate(model_json["oblivious_trees"]):
        splits = tree["splits"]
        depth = len(splits)
        left, right, feature, cover, levels = [], [], [], [], []
        # Level l (root 0) tests split depth-1-l; node 2^l - 1 + k, bit i of k the way at level i.
        for level in range(depth):
            for k in range(1 << level):
                left.append((1 << (level + 1)) - 1 + k)
                right.append((1 << (level + 1)) - 1 + (k | 1 << level))
                feature.append(player(splits[depth - 1 - level]))
                levels.append(level)
                cover.append(0.0)
        leaf_values = np.asarray(tree["leaf_values"], dtype=np.float64).reshape(1 << depth, -1)
        values = [None] * len(left)
        for k in range(1 << depth):
            leaf = sum(((k >> i) & 1) << (depth - 1 - i) for i in range(depth))
            left.append(-1), right.append(-1), feature.append(-1), levels.append(depth)
            cover.append(float(tree["leaf_weights"][leaf]))
            values.append(leaf_values[leaf])
        for i in reversed(range(len(levels) - (1 << depth))):
            cover[i] = cover[left[i]] + cover[right[i]]

        def goes_left(i, row, t=t, depth=depth, levels=levels):
            return not (int(leaf_indexes[row, t]) >> (depth - 1 - levels[i])) & 1

        for g in range(leaf_values.shape[1]):
            trees.append({"left": left, "right": right, "feature": feature, "cover": cover, "output": g, "weight": float(scale),
                          "value": [0.0 if v is None else float(v[g]) for v in values], "goes_left": goes_left})
    dims = leaf_values.shape[1]
    base = bias if len(bias) == dims else np.full(dims, bias[0] if len(bias) else 0.0)
    return trees, base, features + len(shared), shared


def fold_players(values: np.ndarray, inter: np.ndarray, features: int, shared: list) -> tuple[np.ndarray, np.ndarray]:
    """Player values (``(n, G, P+1)``) and interactions as the features': a player shared by
    several features split equally among them (CatBoost's UnpackInternalShaps), on both sides of
    the interaction matrices."""
    players = values.shape[-1] - 1
    fold = np.zeros((players + 1, features + 1))
    for j in range(features):
        fold[j, j] = 1.0
    for k, members in enumerate(shared):
        fold[features + k, list(members)] = 1.0 / len(members)
    fold[players, features] = 1.0
    return values @ fold, np.einsum("ia,ngij,jb->ngab", fold, inter, fold)


def write_combinations(out, name: str, model, X, background, cat_features) -> None:
    """A fixture of CTRs of feature combinations (``max_ctr_complexity`` above 1): CatBoost's own
    ShapValues, and interaction values by brute force over the players, folded into the features
    (CatBoost's own ShapInteractionValues drop the pairs of players that fold onto one feature, so
    their rows do not add up to its ShapValues; they are kept as ``library_interactions``); and
    over ``background`` (written as ``background_<rows>.parquet``) CatBoost's own interventional
    values (its Independent Tree SHAP, ``reference_data=``) as ``background_contribs``."""
    d = out / name
    d.mkdir(parents=True)
    save(model, d)
    model_json = json.loads((d / "model.json").read_text())
    pq.write_table(pa.Table.from_pandas(X, preserve_index=False), d / "input.parquet")
    pq.write_table(pa.Table.from_pandas(background, preserve_index=False), d / f"background_{len(background)}.parquet")
    pool = catboost.Pool(X, cat_features=cat_features)
    n, f = X.shape
    sv = np.asarray(model.get_feature_importance(pool, type="ShapValues"), dtype=np.float64).reshape(n, -1, f + 1)
    margin = np.asarray(model.predict(pool, prediction_type="RawFormulaVal"), dtype=np.float64).reshape(n, -1)
    # CatBoost's Independent Tree SHAP asks for labels, which the values of the margin do not use.
    background_margin = model.predict(catboost.Pool(background, cat_features=cat_features), prediction_type="RawFormulaVal")
    independent = np.asarray(model.get_feature_importance(
        catboost.Pool(X, label=margin[:, 0], cat_features=cat_features), type="ShapValues",
        reference_data=catboost.Pool(background, label=background_margin, cat_features=cat_features)), dtype=np.float64).reshape(n, -1, f + 1)
    independent_additivity = np.abs(independent.sum(axis=2) - margin).max()
    assert independent_additivity < 1e-9, f"{name}: CatBoost's independent values miss RawFormulaVal by {independent_additivity:.2e}"
    leaf_indexes = np.asarray(model.calc_leaf_indexes(pool))
    trees, base, players, shared = symmetric_trees_by_players(model_json, leaf_indexes)
    assert shared, f"{name}: no CTR of a combination of categorical features"
    values, inter = brute_force_path_dependent(trees, base, players, list(range(n)), interactions=True)
    contribs, interactions = fold_players(values, inter, f, shared)
    error = np.abs(contribs - sv).max() / np.abs(sv).max()
    assert error < 1e-9, f"{name}: brute force over players misses CatBoost's ShapValues by {error:.2e}"
    additivity = np.abs(contribs.sum(axis=2) - margin).max()
    assert additivity < 1e-9, f"{name}: brute force misses CatBoost's RawFormulaVal by {additivity:.2e}"
    library = np.asarray(model.get_feature_importance(pool, type="ShapInteractionValues"), dtype=np.float64).reshape(n, -1, f + 1, f + 1)
    expected = {
        "library": "catboost", "version": catboost.__version__,
        "reference": "CatBoost's ShapValues; interactions by brute force over the players, folded into the features",
        "rows": n, "groups": sv.shape[1], "features": list(X.columns), "precision": "float64",
        "players_shared": [list(map(int, s)) for s in shared],
        "contribs": f64_list(sv), "interactions": f64_list(interactions), "margin": f64_list(margin),
        "library_interactions": f64_list(library), "background_contribs": f64_list(independent),
    }
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"{name}: {model.tree_count_} trees, {len(model_json['features_info']['ctrs'])} CTRs, players shared by {shared}; "
          f"brute force = ShapValues to {error:.1e}")


COMBINATIONS = "combinations"

NON_SYMMETRIC = ["cb_depthwise_missing", "cb_lossguide_binary", "cb_depthwise_multiclass", "cb_lossguide_categories", "cb_depthwise_multirmse", "cb_lossguide_ctr"]
CTR = ["cb_ctr_regression", "cb_ctr_multiclass"]


def ctr_frame(n: int, seed: int):
    """Float features, a few-category column (one-hot) and two many-category columns (CTRs: a
    string one and an integer one, which CatBoost hashes as its digits), and a target that
    depends on each."""
    r = np.random.default_rng(SEED + seed)
    X, y = data(n, 4, seed)
    city_effect = r.normal(size=40)
    df = pd.DataFrame({"f0": X[:, 0], "f1": X[:, 1], "colour": r.choice(["red", "green", "blue"], size=n),
                       "city": [f"city{k}" for k in r.integers(0, 40, size=n)], "store": r.integers(100, 125, size=n)})
    y = y + (df["colour"] == "green") * 1.0 + city_effect[df["city"].str[4:].astype(int)] + (df["store"] % 3 == 0) * 0.7
    return df, y


def ctr_rows(df):
    """Rows to explain, with categories training never saw (a CTR of zero counts)."""
    test = df.iloc[:ROWS].copy()
    test.loc[test.index[0], "city"] = "atlantis"
    test.loc[test.index[1], "store"] = 999
    test.loc[test.index[2], "colour"] = "purple"
    return test


def main() -> None:
    out = output_dir(["cb_binary_missing", "cb_multiclass", "cb_regression_deep", "cb_one_hot_categories"] + NON_SYMMETRIC + CTR)

    X, y = data(800, 6, 1, nan=0.06)
    m = catboost.CatBoostClassifier(iterations=20, depth=5, random_seed=0, verbose=0, allow_writing_files=False, nan_mode="Max").fit(X, y > 0.2)
    write(out, "cb_binary_missing", m, X[:ROWS])

    X, y = data(800, 5, 2, nan=0.03)
    m = catboost.CatBoostClassifier(iterations=12, depth=4, loss_function="MultiClass", random_seed=0, verbose=0, allow_writing_files=False).fit(X, np.digitize(y, [-1.0, 1.0]))
    write(out, "cb_multiclass", m, X[:ROWS])

    # Depth 12: most of the 4096 leaves of each tree are empty (weight 0).
    X, y = data(3000, 6, 3)
    m = catboost.CatBoostRegressor(iterations=4, depth=12, random_seed=0, verbose=0, allow_writing_files=False).fit(X, y)
    write(out, "cb_regression_deep", m, X[:ROWS], interactions=False)

    # One-hot categorical features (few categories, one_hot_max_size above them): a string
    # column and an integer one, which CatBoost hashes as its digits; the rows include a
    # category not seen in training.
    r = np.random.default_rng(SEED + 4)
    X, y = data(1500, 4, 4)
    df = pd.DataFrame({"f0": X[:, 0], "f1": X[:, 1], "colour": r.choice(["red", "green", "blue"], size=len(X)),
                       "grade": r.integers(1, 5, size=len(X))})
    y = y + (df["colour"] == "green") * 1.5 - (df["grade"] == 3) * 1.0
    m = catboost.CatBoostRegressor(iterations=15, depth=4, one_hot_max_size=10, random_seed=0, verbose=0,
                                   allow_writing_files=False).fit(df, y, cat_features=["colour", "grade"])
    test = df.iloc[:ROWS].copy()
    test.loc[test.index[0], "colour"] = "purple"
    test.loc[test.index[1], "grade"] = 9
    write(out, "cb_one_hot_categories", m, test, cat_features=["colour", "grade"])

    # Non-symmetric trees: few features (the reference enumerates every coalition).
    quiet = dict(random_seed=0, verbose=0, allow_writing_files=False)
    X, y = data(1200, 5, 5, nan=0.08)
    m = catboost.CatBoostRegressor(iterations=10, depth=4, grow_policy="Depthwise", nan_mode="Max", **quiet).fit(X, y)
    write_non_symmetric(out, "cb_depthwise_missing", m, X[:ROWS])

    X, y = data(1200, 5, 6, nan=0.05)
    m = catboost.CatBoostClassifier(iterations=12, grow_policy="Lossguide", max_leaves=10, **quiet).fit(X, y > 0.3)
    write_non_symmetric(out, "cb_lossguide_binary", m, X[:ROWS])

    X, y = data(1200, 4, 7, nan=0.04)
    m = catboost.CatBoostClassifier(iterations=6, depth=3, grow_policy="Depthwise", loss_function="MultiClass", **quiet).fit(X, np.digitize(y, [-1.0, 1.0]))
    write_non_symmetric(out, "cb_depthwise_multiclass", m, X[:ROWS])

    r = np.random.default_rng(SEED + 8)
    X, y = data(1500, 4, 8)
    df = pd.DataFrame({"f0": X[:, 0], "f1": X[:, 1], "f2": X[:, 2], "colour": r.choice(["red", "green", "blue"], size=len(X)),
                       "grade": r.integers(1, 5, size=len(X))})
    y = y + (df["colour"] == "green") * 1.5 - (df["grade"] == 3) * 1.0
    m = catboost.CatBoostRegressor(iterations=10, grow_policy="Lossguide", max_leaves=12, one_hot_max_size=10, **quiet).fit(df, y, cat_features=["colour", "grade"])
    test = df.iloc[:ROWS].copy()
    test.loc[test.index[0], "colour"] = "purple"
    write_non_symmetric(out, "cb_lossguide_categories", m, test, cat_features=["colour", "grade"])

    X, y = data(1200, 4, 9, nan=0.03)
    targets = np.c_[y, np.nan_to_num(X[:, 0]) * np.nan_to_num(X[:, 1])]
    m = catboost.CatBoostRegressor(iterations=8, depth=3, grow_policy="Depthwise", loss_function="MultiRMSE", **quiet).fit(X, targets)
    write_non_symmetric(out, "cb_depthwise_multirmse", m, X[:ROWS])

    # CTR splits (categorical features with more categories than one_hot_max_size; CatBoost's
    # default max_ctr_complexity=1 makes each a CTR of one feature): CatBoost's default CTRs
    # (Borders and Counter) on a regressor with a one-hot feature beside them, and every CTR type
    # on a multiclass model. CatBoost's own values are exact on oblivious trees.
    cat = ["colour", "city", "store"]
    df, y = ctr_frame(3000, 10)
    m = catboost.CatBoostRegressor(iterations=25, depth=5, one_hot_max_size=4, max_ctr_complexity=1, **quiet).fit(df, y, cat_features=cat)
    write(out, "cb_ctr_regression", m, ctr_rows(df), cat_features=cat)

    df, y = ctr_frame(3000, 11)
    m = catboost.CatBoostClassifier(iterations=10, depth=4, loss_function="MultiClass", one_hot_max_size=4, max_ctr_complexity=1,
                                    simple_ctr=["Borders", "Buckets", "Counter"], **quiet).fit(df, np.digitize(y, [-1.0, 1.0]), cat_features=cat)
    write(out, "cb_ctr_multiclass", m, ctr_rows(df), cat_features=cat)

    df, y = ctr_frame(2000, 12)
    m = catboost.CatBoostRegressor(iterations=10, grow_policy="Lossguide", max_leaves=10, one_hot_max_size=4, max_ctr_complexity=1, **quiet).fit(df, y, cat_features=cat)
    write_non_symmetric(out, "cb_lossguide_ctr", m, ctr_rows(df), cat_features=cat)

    combinations_fixture(out)


def combinations_fixture(out) -> None:
    """CTRs of feature combinations, as CatBoost trains them by default from 200 trees on
    (``max_ctr_complexity`` 4): three CTR features, so players shared by two and by three of them,
    and float and one-hot conditions in the combinations. In a directory of their own
    (``combinations/``): the engines that refuse such models (all but oblivious and treeshap)
    are not run on them by the tests that run every engine on every fixture."""
    quiet = dict(random_seed=0, verbose=0, allow_writing_files=False)
    combos = out / COMBINATIONS
    shutil.rmtree(combos, ignore_errors=True)
    cat = ["colour", "city", "store", "brand"]
    df, y = ctr_frame(3000, 13)
    r = np.random.default_rng(SEED + 13)
    df["brand"] = [f"b{k}" for k in r.integers(0, 30, size=len(df))]
    y = y + ((df["city"].str[4:].astype(int) * 7 + df["store"] * 3 + df["brand"].str[1:].astype(int)) % 5 < 2) * 3.0
    m = catboost.CatBoostRegressor(iterations=30, depth=4, one_hot_max_size=4, max_ctr_complexity=4, **quiet).fit(df, y, cat_features=cat)
    test = ctr_rows(df)[:16].copy()
    test.loc[test.index[3], "brand"] = "b999"
    write_combinations(combos, "cb_ctr_combinations", m, test, df.iloc[1000:1040], cat)


if __name__ == "__main__":
    main()
