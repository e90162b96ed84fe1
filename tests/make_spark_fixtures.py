#!/usr/bin/env python3
"""Regenerate the Spark ML fixtures (tests/fixtures/spark_*), on a local Spark session.

Each fixture holds
  model/           the model directory Spark writes with ``model.save(dir)`` (metadata JSON,
                   Parquet node data, tree weights), without Hadoop's .crc side files
  input.parquet    the rows to explain, one column per vector slot (f0, f1, ...), or for a
                   pipeline one per column its VectorAssembler assembles, by that name
  expected.json    references

Two are the models users save around a tree model: ``spark_pipeline_gbt``, a PipelineModel
(StringIndexer, VectorAssembler, GBTClassifier: a categorical feature from the indexer), and
``spark_cv_forest``, a CrossValidatorModel whose best model is a PipelineModel (VectorAssembler
into a RandomForestClassifier reading another features column).

References: shap's TreeExplainer for Spark models (which reads the trees through
``rootNode``); Spark's own ``transform`` for the margins (``probability`` for forests and
trees, ``rawPrediction[1]`` for a GBT classifier, ``prediction`` for regressors). shap does
not take categorical splits, so the categorical fixture's reference is brute-force
path-dependent Shapley values (all coalitions) over the trees as Spark's node API gives them.

Needs Java 17 and pyspark (tests/requirements.txt). Usage:
  python tests/make_spark_fixtures.py [--out tests/fixtures]
"""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import shap
import xgboost as xgb
from fixture_common import f64_list, output_dir, write_input, xgboost_expected
from pyspark.ml import Pipeline
from pyspark.ml.classification import DecisionTreeClassifier, GBTClassifier, OneVsRest, RandomForestClassifier
from pyspark.ml.evaluation import BinaryClassificationEvaluator
from pyspark.ml.feature import StringIndexer, VectorAssembler, VectorIndexer
from pyspark.ml.linalg import Vectors
from pyspark.ml.regression import DecisionTreeRegressor, RandomForestRegressor
from pyspark.ml.tuning import CrossValidator, ParamGridBuilder
from pyspark.sql import SparkSession

SEED = 20261127
ROWS = 30


def data(n: int, f: int, seed: int):
    r = np.random.default_rng(SEED + seed)
    X = np.round(r.normal(size=(n, f)), 3)
    y = X[:, 0] * 1.5 + np.sin(2 * X[:, 1]) + X[:, 2] * X[:, 3] + 0.3 * r.normal(size=n)
    return X, y


def frame(spark, X, y):
    return spark.createDataFrame([(Vectors.dense(x.tolist()), float(t)) for x, t in zip(X, y)], ["features", "label"])


def shap_reference(model, X: np.ndarray, groups: int):
    e = shap.TreeExplainer(model)
    n, f = X.shape
    sv = np.asarray(e.shap_values(X, check_additivity=False), dtype=np.float64).reshape(n, f, -1)
    base = np.asarray(e.expected_value, dtype=np.float64).reshape(-1)
    assert sv.shape[2] == groups, (sv.shape, groups)
    c = np.zeros((n, groups, f + 1))
    c[:, :, :f] = sv.transpose(0, 2, 1)
    c[:, :, f] = base
    return c


def spark_tree(node) -> dict:
    """A Spark tree (its Java node objects) as nested dicts."""
    stats = list(node.impurityStats().stats())
    regression = node.impurityStats().getClass().getSimpleName() == "VarianceCalculator"
    if node.getClass().getSimpleName() == "LeafNode":
        return {"leaf": True, "prediction": node.prediction(), "stats": stats, "regression": regression}
    split = node.split()
    kind = split.getClass().getSimpleName()
    out = {"leaf": False, "feature": split.featureIndex(), "stats": stats, "regression": regression,
           "left": spark_tree(node.leftChild()), "right": spark_tree(node.rightChild())}
    if kind == "CategoricalSplit":
        out["categories"] = set(float(c) for c in split.leftCategories())
    else:
        out["threshold"] = split.threshold()
    return out


def brute_force_regression(trees: list[tuple[dict, float]], X: np.ndarray, leaf=lambda t: t["prediction"]) -> np.ndarray:
    """Path-dependent Shapley values of a sum of weighted trees, by all coalitions; ``leaf`` is a
    leaf's value (a regression tree's prediction by default), covers are ``stats[0]`` for
    regression trees and the class counts' sum for classification trees."""
    F = X.shape[1]

    def goes_left(t, x):
        v = x[t["feature"]]
        return v in t["categories"] if "categories" in t else v <= t["threshold"]

    def cover(t):
        return t["stats"][0] if t["regression"] else sum(t["stats"])

    def expect(t, x, S):
        if t["leaf"]:
            return leaf(t)
        if t["feature"] in S:
            return expect(t["left"] if goes_left(t, x) else t["right"], x, S)
        cl, cr = cover(t["left"]), cover(t["right"])
        return (cl * expect(t["left"], x, S) + cr * expect(t["right"], x, S)) / (cl + cr)

    out = np.zeros((len(X), 1, F + 1))
    for n, x in enumerate(X):
        v = {frozenset(S): sum(w * expect(t, x, set(S)) for t, w in trees)
             for size in range(F + 1) for S in itertools.combinations(range(F), size)}
        for i in range(F):
            for size in range(F):
                for S in itertools.combinations([j for j in range(F) if j != i], size):
                    w = math.factorial(size) * math.factorial(F - size - 1) / math.factorial(F)
                    out[n, 0, i] += w * (v[frozenset(S) | {i}] - v[frozenset(S)])
        out[n, 0, F] = v[frozenset()]
    return out


def write(out, name: str, model, X: np.ndarray, margin: np.ndarray, contribs: np.ndarray, reference: str,
          names: list[str] | None = None) -> None:
    d = out / name
    d.mkdir(parents=True)
    model.write().overwrite().save(str(d / "model"))
    for crc in list((d / "model").rglob("*.crc")) + list((d / "model").rglob("_SUCCESS")):
        crc.unlink()
    names = names or [f"f{j}" for j in range(X.shape[1])]
    write_input(d / "input.parquet", X, names)
    n, g = contribs.shape[0], contribs.shape[1]
    import pyspark
    expected = {
        "library": "spark", "version": pyspark.__version__, "shap": shap.__version__, "reference": reference,
        "rows": n, "groups": g, "features": names, "precision": "float64",
        "contribs": f64_list(contribs), "interactions": None, "margin": f64_list(np.asarray(margin).reshape(n, g)),
    }
    (d / "expected.json").write_text(json.dumps(expected))
    print(f"{name}: additivity of the reference vs Spark {np.abs(contribs.sum(axis=2) - np.asarray(margin).reshape(n, g)).max():.2e}")


def main() -> None:
    out = output_dir(["spark_random_forest", "spark_gbt_classifier", "spark_forest_regressor", "spark_tree_categorical",
                      "spark_pipeline_gbt", "spark_cv_forest", "spark_one_vs_rest_gbt", "spark_one_vs_rest_forest",
                      "spark_one_vs_rest_tree", "spark_xgboost_pipeline"])
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        X, y = data(600, 5, 1)
        Xt = X[:ROWS]
        test = frame(spark, Xt, np.zeros(len(Xt)))

        m = RandomForestClassifier(numTrees=8, maxDepth=5, seed=0).fit(frame(spark, X, (y > 0).astype(float)))
        proba = np.array([r.probability.toArray() for r in m.transform(test).select("probability").collect()])
        write(out, "spark_random_forest", m, Xt, proba, shap_reference(m, Xt, 2), "shap")

        m = GBTClassifier(maxIter=10, maxDepth=3, seed=0).fit(frame(spark, X, (y > 0.3).astype(float)))
        raw = np.array([r.rawPrediction.toArray()[1] for r in m.transform(test).select("rawPrediction").collect()])
        write(out, "spark_gbt_classifier", m, Xt, raw, shap_reference(m, Xt, 1), "shap")

        # Depth 12: deep paths through a forest.
        m = RandomForestRegressor(numTrees=6, maxDepth=12, seed=0).fit(frame(spark, X, y))
        pred = np.array([r.prediction for r in m.transform(test).select("prediction").collect()])
        write(out, "spark_forest_regressor", m, Xt, pred, shap_reference(m, Xt, 1), "shap")

        # A categorical feature (marked by VectorIndexer: at most 6 distinct values), whose split
        # lists the categories going left.
        r = np.random.default_rng(SEED + 9)
        X, y = data(600, 4, 2)
        X[:, 3] = r.integers(0, 6, size=len(X)).astype(float)
        y = y + np.isin(X[:, 3], [1, 4]) * 2.0
        train = VectorIndexer(inputCol="features", outputCol="indexed", maxCategories=6).fit(frame(spark, X, y))
        indexed = train.transform(frame(spark, X, y)).select("indexed", "label").withColumnRenamed("indexed", "features")
        m = DecisionTreeRegressor(maxDepth=5, seed=0).fit(indexed)
        Xi = np.array([row.features.toArray() for row in indexed.limit(ROWS).collect()])
        pred = np.array([row.prediction for row in m.transform(indexed.limit(ROWS)).select("prediction").collect()])
        tree = spark_tree(m._java_obj.rootNode())
        write(out, "spark_tree_categorical", m, Xi, pred, brute_force_regression([(tree, 1.0)], Xi), "brute force (all coalitions)")

        # A PipelineModel: a string column indexed (a categorical feature of the GBT model, from
        # the indexer's metadata), assembled with three numeric columns.
        X, y = data(600, 4, 3)
        X = X[:, :3]
        cities = np.array(["oslo", "lima", "pune", "kobe"])[r.integers(0, 4, size=len(X))]
        y = y + (cities == "lima") * 1.5
        rows = spark.createDataFrame([(float(a), float(b), float(c), str(k), float(t > 0.5)) for (a, b, c), k, t in zip(X, cities, y)],
                                     ["amount", "age", "score", "city", "label"])
        names = ["amount", "age", "score", "city_index"]
        pipeline = Pipeline(stages=[StringIndexer(inputCol="city", outputCol="city_index"),
                                    VectorAssembler(inputCols=names, outputCol="features"),
                                    GBTClassifier(maxIter=8, maxDepth=3, seed=0)]).fit(rows)
        test = pipeline.transform(rows.limit(ROWS)).select(*names, "rawPrediction").collect()
        Xp = np.array([[row[n] for n in names] for row in test])
        raw = np.array([row.rawPrediction.toArray()[1] for row in test])
        gbt = pipeline.stages[-1]
        trees = [(spark_tree(t._java_obj.rootNode()), w) for t, w in zip(gbt.trees, gbt.treeWeights)]
        write(out, "spark_pipeline_gbt", pipeline, Xp, raw, brute_force_regression(trees, Xp), "brute force (all coalitions)", names)

        # A CrossValidatorModel over a pipeline whose forest reads the column "assembled".
        X, y = data(600, 5, 4)
        names = ["income", "tenure", "balance", "utilisation", "inquiries"]
        rows = spark.createDataFrame([(*map(float, x), float(t > 0.3)) for x, t in zip(X, y)], [*names, "label"])
        forest = RandomForestClassifier(numTrees=6, featuresCol="assembled", seed=0)
        tuned = CrossValidator(estimator=Pipeline(stages=[VectorAssembler(inputCols=names, outputCol="assembled"), forest]),
                               estimatorParamMaps=ParamGridBuilder().addGrid(forest.maxDepth, [3, 5]).build(),
                               evaluator=BinaryClassificationEvaluator(), numFolds=2, seed=0).fit(rows)
        test = tuned.transform(rows.limit(ROWS)).select(*names, "probability").collect()
        Xt = np.array([[row[n] for n in names] for row in test])
        proba = np.array([row.probability.toArray() for row in test])
        best = tuned.bestModel.stages[-1]
        write(out, "spark_cv_forest", tuned, Xt, proba, shap_reference(best, Xt, 2), "shap", names)

        # OneVsRestModels of three classes (how Spark trains a multiclass GBT model): an output a
        # class, its binary model's rawPrediction(1), as the OneVsRestModel's rawPrediction.
        X, y = data(600, 4, 5)
        labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3])).astype(float)
        train, test = frame(spark, X, labels), frame(spark, X[:ROWS], np.zeros(ROWS))
        for name, classifier in (("spark_one_vs_rest_gbt", GBTClassifier(maxIter=6, maxDepth=3, seed=0)),
                                 ("spark_one_vs_rest_forest", RandomForestClassifier(numTrees=4, maxDepth=3, seed=0)),
                                 ("spark_one_vs_rest_tree", DecisionTreeClassifier(maxDepth=3, seed=0))):
            m = OneVsRest(classifier=classifier).fit(train)
            raw = np.array([r.rawPrediction.toArray() for r in m.transform(test).select("rawPrediction").collect()])
            contribs = np.zeros((ROWS, 3, X.shape[1] + 1))
            for k, binary in enumerate(m.models):
                if hasattr(binary, "treeWeights"):
                    trees = [(spark_tree(t._java_obj.rootNode()), w) for t, w in zip(binary.trees, binary.treeWeights)]
                else:
                    trees = [(spark_tree(binary._java_obj.rootNode()), 1.0)]
                # rawPrediction(1): a GBT tree's prediction; a forest's trees' class-1 shares
                # summed; a decision tree's class-1 count.
                leaf = {"spark_one_vs_rest_gbt": lambda t: t["prediction"],
                        "spark_one_vs_rest_forest": lambda t: t["stats"][1] / sum(t["stats"]),
                        "spark_one_vs_rest_tree": lambda t: t["stats"][1]}[name]
                contribs[:, k:k + 1, :] = brute_force_regression(trees, X[:ROWS], leaf)
            write(out, name, m, X[:ROWS], raw, contribs, "brute force (all coalitions)")

        # An xgboost.spark classifier in a PipelineModel (its stage saves the booster's JSON):
        # XGBoost's own pred_contribs.
        from xgboost.spark import SparkXGBClassifier

        X, y = data(600, 4, 6)
        names = ["amount", "age", "score", "tenure"]
        rows = spark.createDataFrame([(*map(float, x), float(t > 0.3)) for x, t in zip(X, y)], [*names, "label"])
        pipeline = Pipeline(stages=[VectorAssembler(inputCols=names, outputCol="features"),
                                    SparkXGBClassifier(n_estimators=6, max_depth=3, num_workers=1, random_state=0)]).fit(rows)
        d = out / "spark_xgboost_pipeline"
        d.mkdir(parents=True)
        pipeline.write().overwrite().save(str(d / "model"))
        for side in list((d / "model").rglob("*.crc")) + list((d / "model").rglob("_SUCCESS")):
            side.unlink()
        write_input(d / "input.parquet", X[:ROWS], names)
        expected = xgboost_expected(xgb, pipeline.stages[-1].get_booster(), xgb.DMatrix(X[:ROWS]), names)
        (d / "expected.json").write_text(json.dumps(expected))
        print(f"spark_xgboost_pipeline: {expected['rows']} rows, XGBoost {xgb.__version__}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
