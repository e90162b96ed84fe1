#!/usr/bin/env python3
"""Randomized differential test: tiny models of every library, drawn from a seed, explained by
shapfusion (the Python package and the CLI) and by the library itself.

Each configuration draws a library and, from what that library trains, an objective
(regression, binary, multiclass, ranking, quantile, Poisson, Tweedie, survival, ...), a depth
and grow policy, missing values, categorical features, class count, forest kind (boosted, DART,
random forest), sample weights and a few hundred rows; trains the model; and checks that

* shapfusion's SHAP values equal the library's own (XGBoost 3.2's exact ``pred_contribs``,
  LightGBM's ``pred_contrib``, CatBoost's ``ShapValues`` where they add up, shap's own
  computation for scikit-learn and Spark ML), or a brute force over all coalitions where the
  library has none or is wrong (CatBoost's non-symmetric trees); LightGBM linear trees, which
  neither LightGBM nor shap explains, over a background, against the definition over every
  coalition with LightGBM scoring each hybrid row (and refused without one);
* they add up to the library's own raw margin;
* the CLI (``shapfusion explain`` on the saved model file) gives the Python package's values
  bit for bit.

A failure prints its seed, index and configuration; ``--replay SEED:INDEX`` runs that one again.

    python tests/differential.py --configs 60                 # a fresh seed, printed
    python tests/differential.py --seed 7 --configs 2000      # the long run
    python tests/differential.py --replay 7:123

Needs the pinned libraries (tests/requirements.txt), shapfusion installed, and the CLI
(``--bin`` or SHAPFUSION_BIN); Spark ML configurations need pyspark and Java, and are left out
with ``--no-spark`` or when pyspark is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Float32 libraries agree to float32 rounding; the others to float64's.
TOLERANCE = {"xgboost": 1e-5, "lightgbm": 1e-9, "catboost": 1e-9, "sklearn": 1e-9, "spark": 1e-9}


class Config(dict):
    """One drawn configuration (a dict, so it prints and replays as JSON)."""


# -- drawing -------------------------------------------------------------------------------------


def draw(rng: np.random.Generator, libraries: list[str]) -> Config:
    library = libraries[rng.integers(len(libraries))]
    c = Config(library=library, rows=int(rng.integers(150, 400)), features=int(rng.integers(3, 6)),
               missing=float(rng.choice([0.0, 0.0, 0.05, 0.2])), weights=bool(rng.random() < 0.3),
               data_seed=int(rng.integers(1 << 31)))
    pick = lambda options: options[rng.integers(len(options))]  # noqa: E731
    if library == "xgboost":
        c.update(objective=pick(["reg:squarederror", "binary:logistic", "multi:softprob", "rank:pairwise", "reg:quantileerror",
                                 "count:poisson", "reg:tweedie", "survival:cox", "reg:absoluteerror", "reg:gamma", "binary:logitraw"]),
                 booster=pick(["gbtree", "gbtree", "dart"]), max_depth=int(rng.integers(1, 6)), rounds=int(rng.integers(1, 12)),
                 num_parallel_tree=int(pick([1, 1, 3])), tree_method=pick(["hist", "approx", "exact"]),
                 grow_policy=pick(["depthwise", "lossguide"]), categorical=bool(rng.random() < 0.3), classes=int(rng.integers(3, 5)))
        if c["categorical"] or c["grow_policy"] == "lossguide":
            c["tree_method"] = "hist"
    elif library == "lightgbm":
        c.update(objective=pick(["regression", "binary", "multiclass", "lambdarank", "quantile", "poisson", "tweedie", "huber",
                                 "cross_entropy", "regression_l1", "gamma"]),
                 boosting=pick(["gbdt", "gbdt", "dart", "rf"]), num_leaves=int(rng.integers(2, 12)), rounds=int(rng.integers(1, 10)),
                 categorical=bool(rng.random() < 0.3), classes=int(rng.integers(3, 5)), min_data_in_leaf=int(pick([1, 5, 20])),
                 linear_tree=bool(rng.random() < 0.2))
        if c["linear_tree"] and c["objective"] == "regression_l1":
            c["objective"] = "regression"  # LightGBM fits no linear trees for it
    elif library == "catboost":
        c.update(objective=pick(["RMSE", "Logloss", "MultiClass", "Quantile", "Poisson", "Tweedie:variance_power=1.5", "MultiRMSE", "MAE"]),
                 grow_policy=pick(["SymmetricTree", "Depthwise", "Lossguide"]), depth=int(rng.integers(1, 5)),
                 rounds=int(rng.integers(1, 10)), categorical=bool(rng.random() < 0.3), classes=int(rng.integers(3, 5)),
                 nan_mode=pick(["Min", "Max"]), one_hot_max_size=int(pick([10, 2])))
    elif library == "sklearn":
        c.update(estimator=pick(["DecisionTreeRegressor", "DecisionTreeClassifier", "RandomForestRegressor", "RandomForestClassifier",
                                 "ExtraTreesRegressor", "ExtraTreesClassifier", "GradientBoostingRegressor", "GradientBoostingClassifier",
                                 "HistGradientBoostingRegressor", "HistGradientBoostingClassifier", "IsolationForest"]),
                 max_depth=int(rng.integers(1, 7)), estimators=int(rng.integers(1, 8)), classes=int(pick([2, 2, 3])),
                 categorical=bool(rng.random() < 0.3), loss=pick(["squared_error", "absolute_error", "huber", "quantile"]))
    else:  # spark
        c.update(estimator=pick(["DecisionTreeRegressor", "DecisionTreeClassifier", "RandomForestRegressor", "RandomForestClassifier",
                                 "GBTRegressor", "GBTClassifier"]),
                 max_depth=int(rng.integers(1, 6)), estimators=int(rng.integers(1, 6)), classes=int(pick([2, 2, 3])),
                 wrap=pick(["none", "none", "pipeline", "one_vs_rest"]))
        if c["wrap"] == "one_vs_rest" and "Classifier" not in c["estimator"]:
            c["wrap"] = "pipeline"  # a OneVsRest model holds classifiers
        c["missing"] = 0.0  # Spark's vector assembler refuses NaN by default
        c["weights"] = False
    return c


def data(c: Config):
    """Rows (a frame, categorical columns as pandas categoricals when drawn), a target for the
    objective, and weights."""
    r = np.random.default_rng(c["data_seed"])
    n, f = c["rows"], c["features"]
    X = r.normal(size=(n, f))
    score = X[:, 0] * 1.5 + np.sin(2 * X[:, 1]) + X[:, 1] * X[:, min(2, f - 1)] + 0.3 * r.normal(size=n)
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(f)])
    if c.get("categorical"):
        codes = r.integers(0, 4, size=n)
        frame[f"f{f - 1}"] = pd.Categorical(np.array(["red", "green", "blue", "grey"])[codes])
        score = score + (codes == 1) * 1.2 - (codes == 3) * 0.8
    if c["missing"]:
        numeric = [col for col in frame.columns if frame[col].dtype != "category"]
        values = frame[numeric].to_numpy()
        values[r.random(values.shape) < c["missing"]] = np.nan
        frame[numeric] = values
    weights = r.uniform(0.2, 2.0, size=n) if c["weights"] else None
    return frame, score, weights


def target(c: Config, score: np.ndarray, kind: str) -> np.ndarray:
    """The target a kind of objective trains on, from the score."""
    q = np.quantile(score, [1 / 3, 2 / 3])
    if kind == "binary":
        return (score > np.median(score)).astype(int)
    if kind == "multiclass":
        return np.digitize(score, np.quantile(score, np.linspace(0, 1, c["classes"] + 1)[1:-1]))
    if kind == "count":
        return np.random.default_rng(c["data_seed"] + 1).poisson(np.exp(0.4 * np.clip(score, -3, 3)))
    if kind == "positive":
        return np.exp(0.3 * np.clip(score, -3, 3))
    if kind == "rank":
        return np.digitize(score, q)
    if kind == "survival":
        return np.where(score > 0, 1, -1) * np.exp(0.3 * np.clip(score, -3, 3))
    if kind == "unit":
        return 1.0 / (1.0 + np.exp(-score))
    return score


# -- one configuration per library: (model file, rows as a frame, shapfusion's view of the
#    model, the library's values (n, G, F+1) or None, the library's margin (n, G)) ---------------


def run_xgboost(c: Config, work: Path):
    import xgboost as xgb

    frame, score, weights = data(c)
    objective = c["objective"]
    kind = {"binary:logistic": "binary", "binary:logitraw": "binary", "multi:softprob": "multiclass", "rank:pairwise": "rank",
            "count:poisson": "count", "reg:tweedie": "count", "reg:gamma": "positive", "survival:cox": "survival"}.get(objective, "regression")
    y = target(c, score, kind)
    params = {"objective": objective, "max_depth": c["max_depth"], "booster": c["booster"], "tree_method": c["tree_method"],
              "grow_policy": c["grow_policy"], "num_parallel_tree": c["num_parallel_tree"], "nthread": 1, "seed": c["data_seed"] % 1000,
              "max_cat_to_onehot": 1}
    if c["grow_policy"] == "lossguide":
        params["max_leaves"] = 8
    if objective == "multi:softprob":
        params["num_class"] = c["classes"]
    if objective == "reg:quantileerror":
        params["quantile_alpha"] = 0.3
    if c["booster"] == "dart":
        params.update(rate_drop=0.3, skip_drop=0.0)
    qid = np.sort(np.random.default_rng(c["data_seed"]).integers(0, 10, size=len(y))) if kind == "rank" else None
    if qid is not None and weights is not None:
        weights = weights[np.unique(qid, return_index=True)[1]]  # ranking weighs whole queries
    dtrain = xgb.DMatrix(frame, y, weight=weights, qid=qid, enable_categorical=True)
    booster = xgb.train(params, dtrain, c["rounds"])
    path = work / "model.json"
    booster.save_model(str(path))
    dtest = xgb.DMatrix(frame, enable_categorical=True)
    contribs = booster.predict(dtest, pred_contribs=True, strict_shape=True)
    margin = booster.predict(dtest, output_margin=True, strict_shape=True)
    n = len(frame)
    return path, frame, booster, contribs.reshape(n, -1, frame.shape[1] + 1), margin.reshape(n, -1)


def run_lightgbm(c: Config, work: Path):
    import lightgbm as lgb

    frame, score, weights = data(c)
    objective = c["objective"]
    kind = {"binary": "binary", "multiclass": "multiclass", "lambdarank": "rank", "poisson": "count", "tweedie": "count",
            "gamma": "positive", "cross_entropy": "unit"}.get(objective, "regression")
    y = target(c, score, kind)
    params = {"objective": objective, "num_leaves": c["num_leaves"], "boosting": c["boosting"], "min_data_in_leaf": c["min_data_in_leaf"],
              "verbose": -1, "num_threads": 1, "seed": c["data_seed"] % 1000, "deterministic": True}
    if objective == "multiclass":
        params["num_class"] = c["classes"]
    if c["boosting"] == "rf":
        params.update(bagging_fraction=0.7, bagging_freq=1, feature_fraction=0.8)
    if c.get("linear_tree"):
        params["linear_tree"] = True
    group = None
    if kind == "rank":
        sizes = np.full(len(y) // 20, 20)
        sizes[-1] += len(y) - sizes.sum()
        group = sizes
    booster = lgb.train(params, lgb.Dataset(frame, y, weight=weights, group=group), c["rounds"])
    path = work / "model.txt"
    booster.save_model(str(path))
    n, f = frame.shape
    margin = np.asarray(booster.predict(frame, raw_score=True)).reshape(n, -1)
    if c.get("linear_tree"):
        # LightGBM's pred_contrib refuses linear trees: check() explains them over a background.
        if c["boosting"] == "rf":
            margin = margin / booster.current_iteration()
        return path, frame, booster, None, margin
    contribs = booster.predict(frame, pred_contrib=True).reshape(n, -1, f + 1)
    if c["boosting"] == "rf":
        # LightGBM's raw score and pred_contrib of a random forest are the sum of its trees; its
        # predict() averages them (average_output), and so does shapfusion's margin.
        iterations = booster.current_iteration()
        contribs, margin = contribs / iterations, margin / iterations
        c["reference"] = "LightGBM's pred_contrib over the forest's size (its raw score is the trees' sum, its predict their mean)"
    return path, frame, booster, contribs, margin


def run_catboost(c: Config, work: Path):
    import catboost
    from make_catboost_fixtures import category_hashes, non_symmetric_trees

    from fixture_common import brute_force_path_dependent

    frame, score, weights = data(c)
    cat = [col for col in frame.columns if frame[col].dtype == "category"]
    if cat:
        frame[cat] = frame[cat].astype(str)
    objective = c["objective"]
    kind = {"Logloss": "binary", "MultiClass": "multiclass", "Poisson": "count", "Tweedie:variance_power=1.5": "count"}.get(objective, "regression")
    y = target(c, score, kind)
    if objective == "MultiRMSE":
        y = np.c_[y, np.nan_to_num(frame["f0"].to_numpy(dtype=float))]
    if objective == "Quantile":
        objective = "Quantile:alpha=0.3"
    quiet = dict(verbose=0, allow_writing_files=False, random_seed=c["data_seed"] % 1000, thread_count=1)
    params = dict(iterations=c["rounds"], loss_function=objective, grow_policy=c["grow_policy"], one_hot_max_size=c.get("one_hot_max_size", 10),
                  nan_mode=c["nan_mode"], **quiet)
    params["depth" if c["grow_policy"] != "Lossguide" else "max_leaves"] = c["depth"] if c["grow_policy"] != "Lossguide" else 2 + 2 * c["depth"]
    model = catboost.CatBoost(params).fit(catboost.Pool(frame, y, weight=weights, cat_features=cat or None))
    path = work / "model.json"
    model.save_model(str(path), format="json")
    pool = catboost.Pool(frame, cat_features=cat or None)
    n, f = frame.shape
    # The references are CatBoost's outputs for the file shapfusion reads: the JSON of a
    # MultiRMSE model with CTRs keeps one CTR table where the trained model has one per target,
    # so CatBoost's own predictions from the file differ from the trained model's.
    saved = catboost.CatBoost()
    saved.load_model(str(path), format="json")
    margin = np.asarray(saved.predict(pool, prediction_type="RawFormulaVal")).reshape(n, -1)
    trained = np.asarray(model.predict(pool, prediction_type="RawFormulaVal")).reshape(n, -1)
    if np.abs(trained - margin).max() > 1e-9:
        c["note"] = f"CatBoost's predictions from its JSON differ from the trained model's by {np.abs(trained - margin).max():.3g}"
    library = np.asarray(saved.get_feature_importance(pool, type="ShapValues")).reshape(n, -1, f + 1)
    if c["grow_policy"] != "SymmetricTree" and np.abs(library.sum(axis=2) - margin).max() > 1e-9:
        # CatBoost's own values do not add up: brute force over the saved trees instead.
        hashes = category_hashes({col: sorted(set(frame[col])) for col in cat}) if cat else {}
        trees, base, _ = non_symmetric_trees(json.loads(path.read_text()), hashes)
        rows = [list(r) for r in frame.itertuples(index=False)]
        library, _ = brute_force_path_dependent(trees, base, f, rows[:12])
        frame, margin = frame.iloc[:12], margin[:12]
        c["reference"] = "brute force (CatBoost's ShapValues do not add up)"
    return path, frame, model, library, margin


def run_sklearn(c: Config, work: Path):
    import shap
    import sklearn.ensemble as ensemble
    import sklearn.tree as tree

    import shapfusion

    frame, score, weights = data(c)
    name = c["estimator"]
    hist = name.startswith("HistGradientBoosting")
    categorical = [j for j, col in enumerate(frame.columns) if frame[col].dtype == "category"]
    # Categories as their integer codes (the estimators' own form); only HistGradientBoosting
    # takes missing values and category sets.
    frame = frame.apply(lambda s: s.cat.codes.astype(float) if s.dtype == "category" else s)
    if not hist:
        frame = frame.fillna(0.0)
        categorical = []
    classifier = "Classifier" in name
    y = target(c, score, "multiclass" if classifier and c["classes"] > 2 else "binary" if classifier else "regression")
    kwargs = {}
    if name in ("DecisionTreeRegressor", "DecisionTreeClassifier"):
        cls = getattr(tree, name)
        kwargs = dict(max_depth=c["max_depth"], random_state=0)
    elif name == "IsolationForest":
        cls = ensemble.IsolationForest
        kwargs = dict(n_estimators=c["estimators"], random_state=0)
    else:
        cls = getattr(ensemble, name)
        if hist:
            kwargs = dict(max_iter=c["estimators"], max_depth=c["max_depth"], random_state=0, categorical_features=categorical or None)
        else:
            kwargs = dict(n_estimators=c["estimators"], max_depth=c["max_depth"], random_state=0)
        if name == "GradientBoostingRegressor":
            kwargs["loss"] = c["loss"]
    model = cls(**kwargs)
    if name == "IsolationForest":
        model.fit(frame)
    else:
        model.fit(frame, y, sample_weight=weights)
    path = work / "model.json"
    shapfusion.save_model(model, str(path))
    n, f = frame.shape
    rows = frame.iloc[:40]
    if categorical or (name == "GradientBoostingClassifier" and c["classes"] > 2):
        # shap reads no category sets and refuses multiclass gradient boosting: brute force over
        # the estimator's own split rules.
        from make_sklearn_fixtures import brute_force

        from shapfusion import _trees_file

        c["reference"] = "brute force (all coalitions)"
        library = brute_force(_trees_file.to_dict(model), rows.to_numpy(dtype=np.float64))
        return path, rows, model, library, sklearn_output(model, rows, library)
    explainer = shap.TreeExplainer(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = np.asarray(explainer.shap_values(rows, check_additivity=False), dtype=np.float64).reshape(len(rows), f, -1)
    base = np.atleast_1d(np.asarray(explainer.expected_value, dtype=np.float64))
    library = np.concatenate([values.transpose(0, 2, 1), np.broadcast_to(base[None, :, None], (len(rows), base.size, 1))], axis=2)
    c["reference"] = f"shap {shap.__version__}"
    return path, rows, model, library, sklearn_output(model, rows, library)


def sklearn_output(model, rows, library):
    """What the trees add up to, from the estimator itself: probabilities of forests and trees,
    the decision function of gradient boosting classifiers, predictions of regressors (an
    IsolationForest's values explain its mean path length, which it does not expose: shap's own
    sums stand in)."""
    name = type(model).__name__
    if name == "IsolationForest":
        return library.sum(axis=2)
    if name.endswith("Classifier"):
        if name.startswith(("GradientBoosting", "HistGradientBoosting")):
            return np.asarray(model.decision_function(rows), dtype=np.float64).reshape(len(rows), -1)
        return np.asarray(model.predict_proba(rows), dtype=np.float64)
    return np.asarray(model.predict(rows), dtype=np.float64).reshape(len(rows), -1)


def run_spark(c: Config, work: Path):
    """A Spark ML tree model, alone (features f0, f1, ...), in a PipelineModel after the
    VectorAssembler that names its features (x0, x1, ...), or a OneVsRestModel of it (an output
    a class: its rawPrediction)."""
    from pyspark.ml import Pipeline, classification, regression
    from pyspark.ml.feature import VectorAssembler

    spark = spark_session()
    frame, score, _ = data(c)
    wrap = c.get("wrap", "none")
    if wrap == "pipeline":
        frame = frame.rename(columns=lambda column: "x" + column[1:])
    classifier = "Classifier" in c["estimator"]
    multiclass = classifier and c["classes"] > 2 and (wrap == "one_vs_rest" or not c["estimator"].startswith("GBT"))
    y = target(c, score, "multiclass" if multiclass else "binary" if classifier else "regression")
    df = spark.createDataFrame(frame.assign(label=y.astype(float)))
    assembler = VectorAssembler(inputCols=list(frame.columns), outputCol="features")
    cls = getattr(classification if classifier else regression, c["estimator"])
    kwargs = dict(maxDepth=c["max_depth"], seed=c["data_seed"] % 1000)
    if "Forest" in c["estimator"]:
        kwargs["numTrees"] = c["estimators"]
    if c["estimator"].startswith("GBT"):
        kwargs["maxIter"] = c["estimators"]
    estimator = cls(**kwargs)
    if wrap == "one_vs_rest":
        estimator = classification.OneVsRest(classifier=estimator)
    if wrap == "pipeline":
        model = Pipeline(stages=[assembler, estimator]).fit(df)
    else:
        df = assembler.transform(df)
        model = estimator.fit(df)
    path = work / "model"
    model.write().overwrite().save("file://" + str(path))
    rows = frame.iloc[:30]
    out = model.transform(df.limit(30)).toPandas()
    if wrap == "one_vs_rest":
        margin = np.array([v.toArray() for v in out["rawPrediction"]])  # each class's model's rawPrediction(1)
    elif not classifier:
        margin = out["prediction"].to_numpy(dtype=float).reshape(-1, 1)
    elif c["estimator"].startswith("GBT"):
        margin = np.array([v.toArray()[1] for v in out["rawPrediction"]]).reshape(-1, 1)  # the margin F
    else:
        margin = np.array([v.toArray() for v in out["probability"]])  # trees of class probabilities
    c["reference"] = "additivity to Spark's own output"
    return path, rows, model, None, margin


_SPARK = {}


def spark_session():
    if "session" not in _SPARK:
        from pyspark.sql import SparkSession

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        _SPARK["session"] = (SparkSession.builder.master("local[1]").appName("shapfusion-differential")
                             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1").getOrCreate())
    return _SPARK["session"]


RUN = {"xgboost": run_xgboost, "lightgbm": run_lightgbm, "catboost": run_catboost, "sklearn": run_sklearn, "spark": run_spark}


# -- checking ------------------------------------------------------------------------------------


def linear_tree_reference(booster, rows: pd.DataFrame, background: pd.DataFrame, forest: bool, transform=None) -> np.ndarray:
    """Interventional SHAP values (n, G, F+1) of a LightGBM model over `background` by their
    definition: for each row and coalition S, LightGBM's mean raw score of the hybrids taking S
    from the row and the rest from each background row (a forest's score the mean of its trees,
    as its predict() gives it). With `transform`, shap's values of transform(raw score): each
    background row's values of its own game scaled by (T(f(x)) - T(f(z))) / (f(x) - f(z)) (1
    where equal), then the mean; the bias the background's mean T(f(z))."""
    from fixture_common import coalition_values, rescaled_coalition_values

    n, f = rows.shape
    scale = 1.0 / booster.current_iteration() if forest else 1.0
    out = []
    for r in range(n):
        hybrids = []
        for s in range(1 << f):
            hybrid = background.copy()
            for j in range(f):
                if s >> j & 1:
                    hybrid.iloc[:, j] = rows.iloc[r, j]
            hybrids.append(hybrid)
        scores = np.asarray(booster.predict(pd.concat(hybrids, ignore_index=True), raw_score=True)) * scale
        games = scores.reshape(1 << f, len(background), -1)
        out.append(coalition_values(games.mean(axis=1), f) if transform is None else rescaled_coalition_values(games, f, transform))
    return np.array(out)


def check_linear_tree(c: Config, cli: str, work: Path, path: Path, rows: pd.DataFrame, booster, margin: np.ndarray) -> None:
    """A LightGBM linear-tree model: refused without a background; over one, the definition's
    values, adding up to LightGBM's margin, and the CLI's bit for bit."""
    import shapfusion

    # A linear tree's leaves whose models have no terms (all of the first tree's) give their
    # constant: a model of only such leaves is explained path-dependently, like any other.
    terms = any(line.startswith("num_features=") and any(int(k) for k in line.split("=")[1].split())
                for line in booster.model_to_string().splitlines())
    try:
        shapfusion.Explainer(booster)
        assert not terms, "a linear-tree model's path-dependent values were not refused"
    except NotImplementedError as e:
        assert terms and "background" in str(e), str(e)
    background, explained = rows.iloc[:8].reset_index(drop=True), rows.iloc[8:20].reset_index(drop=True)
    ours = shapfusion.Explainer(booster, background=background).shap_values(explained)
    n, f = explained.shape
    ours = ours.reshape(n, -1, f + 1)
    reference = linear_tree_reference(booster, explained, background, c["boosting"] == "rf")
    assert reference.shape == ours.shape, f"layout: ours {ours.shape}, the definition's {reference.shape}"
    error = float(np.abs(ours - reference).max()) / max(float(np.abs(ours).max()), 1e-12)
    assert error <= 1e-9, f"interventional values of linear trees off the definition by {error:.3e} of max |phi|"
    off = float(np.abs(ours.sum(axis=2) - margin[8:20]).max()) / max(float(np.abs(margin).max()), 1.0)
    assert off <= 1e-8, f"values add up to {off:.3e} off the library's margin"
    if c["objective"] == "binary":
        from fixture_common import logistic

        # A classifier's probability: shap's definition for a transform, adding up to it.
        probability = shapfusion.Explainer(booster, background=background, transform="logistic").shap_values(explained)
        probability = probability.reshape(n, -1, f + 1)
        reference = linear_tree_reference(booster, explained, background, c["boosting"] == "rf", logistic)
        error = float(np.abs(probability - reference).max()) / max(float(np.abs(probability).max()), 1e-12)
        assert error <= 1e-9, f"probability values of linear trees off the definition by {error:.3e} of max |phi|"
        off = float(np.abs(probability.sum(axis=2) - logistic(margin[8:20])).max())
        assert off <= 1e-9, f"probability values add up to {off:.3e} off the library's probability"
    table, bg = (pa.Table.from_pandas(frame, preserve_index=False) for frame in (explained, background))
    pq.write_table(table, work / "rows.parquet")
    pq.write_table(bg, work / "background.parquet")
    out = work / "out.parquet"
    done = subprocess.run([cli, "explain", "--model", str(path), "--input", str(work / "rows.parquet"), "--output", str(out),
                           "--background", str(work / "background.parquet"), "--no-progress"], capture_output=True, text=True)
    assert done.returncode == 0, f"the CLI failed: {done.stderr.strip()[-2000:]}"
    from_package = pa.Table.from_batches([shapfusion.Explainer(path, background=bg).shap_values(table, as_arrow=True)])
    assert pq.read_table(out).equals(from_package), "the CLI's values differ from the package's"


def check(c: Config, cli: str, work: Path) -> None:
    import shapfusion

    path, rows, model, library, margin = RUN[c["library"]](c, work)
    if c.get("linear_tree"):
        check_linear_tree(c, cli, work, path, rows, model, margin)
        return
    explainer = shapfusion.Explainer(model if c["library"] not in ("sklearn", "spark") else path)
    ours = explainer.shap_values(rows)
    n, f = rows.shape
    ours = ours.reshape(n, -1, f + 1)
    tolerance = TOLERANCE[c["library"]]
    scale = max(float(np.abs(ours).max()), 1e-12)
    if library is not None:
        assert library.shape == ours.shape, f"layout: ours {ours.shape}, the library's {library.shape}"
        error = float(np.abs(ours - library).max()) / scale
        assert error <= tolerance, f"SHAP values off the library's ({c.get('reference', c['library'])}) by {error:.3e} of max |phi|"
    # Additivity against the library's own output.
    total = ours.sum(axis=2)
    assert total.shape == margin.shape, f"margin layout: ours {total.shape}, the library's {margin.shape}"
    off = float(np.abs(total - margin).max()) / max(float(np.abs(margin).max()), 1.0)
    assert off <= max(tolerance, 1e-9) * 10, f"values add up to {off:.3e} off the library's margin"
    # The CLI reads the saved file and gives the package's values bit for bit.
    table = pa.Table.from_pandas(rows, preserve_index=False)
    pq.write_table(table, work / "rows.parquet")
    out = work / "out.parquet"
    done = subprocess.run([cli, "explain", "--model", str(path), "--input", str(work / "rows.parquet"), "--output", str(out), "--no-progress"],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"the CLI failed: {done.stderr.strip()[-2000:]}"
    from_cli = pq.read_table(out)
    from_package = pa.Table.from_batches([shapfusion.Explainer(path).shap_values(table, as_arrow=True)])
    assert from_cli.equals(from_package), "the CLI's values differ from the package's"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="the run's seed (default: a fresh one, printed)")
    ap.add_argument("--configs", type=int, default=60, help="configurations to draw")
    ap.add_argument("--replay", help="SEED:INDEX, one configuration again")
    ap.add_argument("--bin", default=os.environ.get("SHAPFUSION_BIN"), help="the shapfusion CLI (default: $SHAPFUSION_BIN)")
    ap.add_argument("--no-spark", action="store_true", help="leave Spark ML out")
    ap.add_argument("--time-limit", type=float, default=0, help="stop drawing after this many seconds (0: none)")
    args = ap.parse_args()
    if not args.bin:
        ap.error("give the CLI with --bin or SHAPFUSION_BIN")
    libraries = ["xgboost", "lightgbm", "catboost", "sklearn"]
    if not args.no_spark:
        try:
            import pyspark  # noqa: F401

            libraries.append("spark")
        except ImportError:
            print("differential: pyspark is not installed; Spark ML left out")
    if args.replay:
        seed, index = (int(x) for x in args.replay.split(":"))
        indices = [index]
    else:
        seed = args.seed if args.seed is not None else secrets.randbelow(1 << 31)
        indices = list(range(args.configs))
    print(f"differential: seed {seed}, {len(indices)} configuration(s), libraries {', '.join(libraries)}", flush=True)
    failures, counts, started = [], {}, time.time()
    for index in indices:
        if args.time_limit and time.time() - started > args.time_limit:
            print(f"differential: time limit reached after {index} configurations")
            break
        c = draw(np.random.default_rng([seed, index]), libraries)
        counts[c["library"]] = counts.get(c["library"], 0) + 1
        with tempfile.TemporaryDirectory(prefix="shapfusion-differential-") as tmp:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    check(c, args.bin, Path(tmp))
            except Exception as e:  # noqa: BLE001 - every failure is reported with its replay line
                failures.append(index)
                print(f"FAILED {seed}:{index} {json.dumps(c)}\n  {type(e).__name__}: {e}")
                if not isinstance(e, AssertionError):
                    traceback.print_exc()
    run = sum(counts.values())
    print(f"differential: {run - len(failures)} of {run} configurations agree ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}); "
          f"seed {seed}, {time.time() - started:.0f} s")
    if failures:
        print("replay with: " + " ".join(f"--replay {seed}:{i}" for i in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
