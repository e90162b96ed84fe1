"""shapfusion.spark on a local Spark session: every fixture through ``explain`` (mapInArrow) and
through a registered SQL function equals ``shapfusion.Explainer`` bit for bit; nulls, empty
partitions, a missing column and a failed-then-retried task.

Needs pyspark (tests/requirements-spark.txt) and Java 17; skipped without them unless
SHAPFUSION_REQUIRE_SPARK=1 (CI sets it)."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import shapfusion
from conftest import REPO

if os.environ.get("SHAPFUSION_REQUIRE_SPARK") == "1":
    import pyspark  # noqa: F401
else:
    pytest.importorskip("pyspark")

import shapfusion.spark as sfs  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"


def fixture_names():
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").exists() and (p / "input.parquet").exists())


def model_path(name: str):
    d = FIXTURES / name
    for m in ("model.json", "model.ubj", "model.txt", "model"):
        if (d / m).exists():
            return d / m
    raise FileNotFoundError(d)


@pytest.fixture(scope="module")
def spark():
    import sys

    from pyspark.sql import SparkSession

    # The Python workers run this interpreter (with shapfusion and pyarrow), as a cluster's
    # PYSPARK_PYTHON names the executors' environment.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # local[2, 3]: two task slots, and a failed task is tried up to three times.
    session = (
        SparkSession.builder.master("local[2, 3]")
        .appName("shapfusion-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "64")
        .getOrCreate()
    )
    yield session
    session.stop()


def with_ids(df):
    from pyspark.sql import functions as F

    return df.withColumn("_row", F.monotonically_increasing_id())


def assert_same(got: pa.Table, want: pa.RecordBatch, what: str) -> None:
    """Every output column equal, bit for bit (Spark carries lists where shapfusion writes
    fixed-size lists: the same values)."""
    assert got.column_names == want.schema.names, what
    for column, values in zip(want.schema.names, sfs.spark_arrays(want)):
        assert got.column(column).combine_chunks().equals(values), (what, column)


def sorted_struct(out, column: str) -> pa.Table:
    """The result's struct column as a table of its fields, in row order."""
    table = sfs.to_arrow(out.orderBy("_row"))
    return pa.Table.from_struct_array(table.column(column).combine_chunks())


@pytest.mark.parametrize("name", fixture_names())
def test_every_fixture_equals_the_explainer_bit_for_bit(spark, name):
    path = model_path(name)
    table = pq.read_table(FIXTURES / name / "input.parquet")
    want = shapfusion.Explainer(str(path)).shap_values(table, as_arrow=True)
    df = with_ids(spark.read.parquet(str(FIXTURES / name / "input.parquet")))
    assert_same(sorted_struct(sfs.explain(df, str(path), keep=["_row"]), "shap"), want, name)
    # The SQL function: the model's features in its order, the same struct.
    features = shapfusion.Explainer(str(path)).feature_names
    function = "shap_" + name
    sfs.register(spark, function, str(path))
    df.createOrReplaceTempView("rows_" + name)
    arguments = ", ".join(f"`{f}`" for f in features)
    sql = spark.sql(f"SELECT _row, {function}({arguments}) AS shap FROM rows_{name}")
    assert_same(sorted_struct(sql, "shap"), want, name + " (SQL)")


def test_the_pandas_udf_of_spark_before_4_1_gives_the_same_struct(spark, monkeypatch):
    """Spark 3.5 and 4.0 have no Arrow UDF: register() falls back to a pandas UDF, checked here
    by hiding arrow_udf from the driver (the choice is made there)."""
    import pyspark.sql.functions as F

    if hasattr(F, "arrow_udf"):
        monkeypatch.delattr(F, "arrow_udf")
    name = "lgb_categorical"
    path = model_path(name)
    table = pq.read_table(FIXTURES / name / "input.parquet")
    explainer = shapfusion.Explainer(str(path))
    df = with_ids(spark.read.parquet(str(FIXTURES / name / "input.parquet")))
    df.createOrReplaceTempView("pandas_rows")
    arguments = ", ".join(f"`{f}`" for f in explainer.feature_names)
    for output in ("shap", "interactions"):
        sfs.register(spark, f"pandas_{output}", str(path), output=output)
        got = sorted_struct(spark.sql(f"SELECT _row, pandas_{output}({arguments}) AS v FROM pandas_rows"), "v")
        assert_same(got, explainer._compute(table, output, True), f"{name} pandas UDF {output}")


def test_lightgbm_linear_trees_over_a_background_and_refused_without(spark):
    """A LightGBM linear-tree model: explained over a background (values and interactions, bit
    for bit the explainer's); without one, refused on the driver, before any task runs."""
    directory = FIXTURES / "linear" / "lgb_linear_multiclass"
    path, table = directory / "model.txt", pq.read_table(directory / "input.parquet")
    background = pq.read_table(directory / "background.parquet")
    df = with_ids(spark.read.parquet(str(directory / "input.parquet")))
    for output in ("shap", "interactions"):
        want = shapfusion.Explainer(str(path), background=background)._compute(table, output, True)
        got = sfs.explain(df, str(path), output=output, background=background, keep=["_row"], name="v")
        assert_same(sorted_struct(got, "v"), want, f"linear trees {output}")
    with pytest.raises(NotImplementedError, match="give background rows"):
        sfs.explain(df, str(path))
    with pytest.raises(NotImplementedError, match="give background rows"):
        sfs.register(spark, "linear_shap", str(path))


def test_interactions_margins_and_interventional(spark):
    path = model_path("xgb_missing")
    table = pq.read_table(FIXTURES / "xgb_missing" / "input.parquet")
    df = with_ids(spark.read.parquet(str(FIXTURES / "xgb_missing" / "input.parquet")))
    explainer = shapfusion.Explainer(str(path))
    for output in ("interactions", "margin"):
        want = explainer._compute(table, output, True)
        assert_same(sorted_struct(sfs.explain(df, str(path), output=output, keep=["_row"]), output), want, output)
    background = table.slice(0, 20)
    want = shapfusion.Explainer(str(path), background=background).shap_values(table, as_arrow=True)
    assert_same(sorted_struct(sfs.explain(df, str(path), background=background, keep=["_row"], name="values"), "values"), want, "interventional")
    # Interventional interaction values, and Banzhaf values with and without the background:
    # the Explainer's, bit for bit.
    for index, rows, output in (("shapley", background, "interactions"), ("banzhaf", None, "shap"), ("banzhaf", background, "interactions")):
        want = shapfusion.Explainer(str(path), background=rows, index=index)._compute(table, output, True)
        got = sfs.explain(df, str(path), output=output, background=rows, keep=["_row"], index=index, name="v")
        assert_same(sorted_struct(got, "v"), want, f"{index} {output} background={rows is not None}")
    sfs.register(spark, "banzhaf_missing", str(path), index="banzhaf")
    df.createOrReplaceTempView("banzhaf_rows")
    arguments = ", ".join(f"`{f}`" for f in explainer.feature_names)
    got = sorted_struct(spark.sql(f"SELECT _row, banzhaf_missing({arguments}) AS v FROM banzhaf_rows"), "v")
    assert_same(got, shapfusion.Explainer(str(path), index="banzhaf").shap_values(table, as_arrow=True), "banzhaf (SQL)")
    with pytest.raises(ValueError, match="index must be one of shapley, banzhaf"):
        sfs.explain(df, str(path), index="owen")


def test_nulls_are_missing_values_and_empty_partitions_give_nothing(spark):
    import pandas as pd

    path = model_path("xgb_missing")
    explainer = shapfusion.Explainer(str(path))
    features = explainer.feature_names
    rng = np.random.default_rng(3)
    values = rng.normal(size=(40, len(features)))
    values[rng.random(values.shape) < 0.3] = np.nan
    frame = pd.DataFrame(values, columns=features)
    frame.insert(0, "id", np.arange(40))
    # Spark nulls (validity bits), not NaN: createDataFrame with None.
    df = spark.createDataFrame(frame.astype(object).where(frame.notna(), None), schema="id long, " + ", ".join(f"`{f}` double" for f in features))
    df = df.repartition(7, "id")  # more partitions than rows in some: empty ones
    out = sfs.to_arrow(sfs.explain(df, str(path), keep=["id"]).orderBy("id"))
    got = pa.Table.from_struct_array(out.column("shap").combine_chunks())
    want = explainer.shap_values(frame[features], as_arrow=True)
    assert out.column("id").to_pylist() == list(range(40))
    assert_same(got, want, "nulls")
    empty = sfs.explain(df.filter("id < 0"), str(path), keep=["id"]).collect()
    assert empty == []


def test_a_missing_feature_column_is_named(spark):
    path = model_path("xgb_missing")
    features = shapfusion.Explainer(str(path)).feature_names
    df = spark.read.parquet(str(FIXTURES / "xgb_missing" / "input.parquet")).drop(features[1])
    with pytest.raises(ValueError, match=f"lacks the model's feature column.*{features[1]}.*it has"):
        sfs.explain(df, str(path))
    with pytest.raises(ValueError, match="features lists"):
        sfs.explain(df, str(path), features=["a"])


def test_a_task_killed_and_retried_loses_and_repeats_no_row(spark):
    """The first attempt of one task fails after the explain stage has produced rows; Spark
    retries it, and every id comes back exactly once."""
    path = model_path("xgb_missing")
    df = with_ids(spark.read.parquet(str(FIXTURES / "xgb_missing" / "input.parquet"))).repartition(3)
    explained = sfs.explain(df, str(path), keep=["_row"])

    def fail_first_attempt(batches):
        from pyspark import TaskContext

        context = TaskContext.get()
        for i, batch in enumerate(batches):
            if context.partitionId() == 0 and context.attemptNumber() == 0 and i == 0:
                raise RuntimeError("killed on purpose (first attempt)")
            yield batch

    rows = sfs.to_arrow(explained.mapInArrow(fail_first_attempt, explained.schema).select("_row")).column("_row").to_pylist()
    expected = sfs.to_arrow(df.select("_row")).column("_row").to_pylist()
    assert sorted(rows) == sorted(expected) and len(rows) == len(set(rows))


def test_each_task_uses_its_task_cpus(spark):
    def threads(batches):
        for _ in batches:
            pass
        yield pa.RecordBatch.from_arrays([pa.array([sfs._task_threads(None)], pa.int32())], names=["threads"])

    got = sfs.to_arrow(spark.range(4).repartition(2).mapInArrow(threads, "threads int")).column("threads").to_pylist()
    assert set(got) == {int(spark.conf.get("spark.task.cpus", "1"))}


def labelled_rows(spark, columns: list[str], seed: int):
    """300 rows of three normal features, an ``id`` and a binary ``label``: as a pandas frame
    and as a Spark DataFrame."""
    import pandas as pd

    frame = pd.DataFrame(np.random.default_rng(seed).normal(size=(300, 3)), columns=columns)
    a, b, c = (frame[name] for name in columns)
    frame["label"] = ((a + b * c) > 0).astype(float)
    frame.insert(0, "id", np.arange(300))
    return frame, spark.createDataFrame(frame)


def test_fitted_spark_ml_and_xgboost_spark_models(spark, tmp_path):
    """A fitted pyspark.ml model (saved and read on the driver, its features named by the
    DataFrame's columns through features=) and an xgboost.spark model (its booster) give what
    shapfusion.Explainer gives for the same model."""
    from pyspark.ml.classification import RandomForestClassifier
    from pyspark.ml.feature import VectorAssembler

    columns = ["amount", "age", "hour"]
    frame, df = labelled_rows(spark, columns, seed=8)
    assembled = VectorAssembler(inputCols=columns, outputCol="features").transform(df)
    forest = RandomForestClassifier(numTrees=5, maxDepth=4, seed=1).fit(assembled)
    forest.write().save(str(tmp_path / "forest"))
    want = shapfusion.Explainer(str(tmp_path / "forest")).shap_values(pa.Table.from_pandas(frame[columns].set_axis(["f0", "f1", "f2"], axis=1)), as_arrow=True)
    got = sfs.to_arrow(sfs.explain(df, forest, features=columns, keep=["id"]).orderBy("id"))
    assert_same(pa.Table.from_struct_array(got.column("shap").combine_chunks()), want, "pyspark.ml forest")
    with pytest.raises(ValueError, match="lacks the model's feature column.*'f0'"):
        sfs.explain(df, forest)  # a Spark ML model names its features f0, f1, ... : map them
    with pytest.raises(ValueError, match="pass features='features'"):
        sfs.explain(assembled, forest)
    # The features read from the vector column the model itself reads, or from an array column.
    from pyspark.sql import functions as F

    for source, column in ((assembled, "features"), (df.withColumn("values", F.array(*columns)), "values")):
        got = sfs.to_arrow(sfs.explain(source, forest, features=column, keep=["id"]).orderBy("id"))
        assert_same(pa.Table.from_struct_array(got.column("shap").combine_chunks()), want, f"features={column!r}")
    short = df.withColumn("values", F.array("amount", "age"))
    with pytest.raises(Exception, match="holds rows of 2 values; the model has 3 features"):
        sfs.explain(short, forest, features="values").collect()
    with pytest.raises(ValueError, match="of type string: a Spark ML vector or an array"):
        sfs.explain(df.withColumn("text", F.lit("x")), forest, features="text")
    # Sparse vectors: their zeros are values (as Spark ML's own models read them), not missing.
    from pyspark.ml.linalg import Vectors

    sparse = spark.createDataFrame([(0, Vectors.sparse(3, {1: 0.5})), (1, Vectors.sparse(3, {}))], ["id", "features"])
    dense = pa.table({"f0": [0.0, 0.0], "f1": [0.5, 0.0], "f2": [0.0, 0.0]})
    got = sfs.to_arrow(sfs.explain(sparse, forest, features="features", keep=["id"]).orderBy("id"))
    assert_same(pa.Table.from_struct_array(got.column("shap").combine_chunks()), shapfusion.Explainer(forest).shap_values(dense, as_arrow=True), "sparse")

    xgboost_spark = pytest.importorskip("xgboost.spark")
    regressor = xgboost_spark.SparkXGBRegressor(features_col=columns, label_col="label", n_estimators=10, max_depth=3, num_workers=1).fit(df)
    booster = regressor.get_booster()
    want = shapfusion.Explainer(booster).shap_values(pa.Table.from_pandas(frame[columns].set_axis(booster.feature_names or columns, axis=1)), as_arrow=True)
    names = booster.feature_names or [f"f{j}" for j in range(3)]
    got = sfs.to_arrow(sfs.explain(df, regressor, features=dict(zip(names, columns)), keep=["id"]).orderBy("id"))
    assert_same(pa.Table.from_struct_array(got.column("shap").combine_chunks()), want, "xgboost.spark")


def test_pipelines_and_tuned_models_name_features_by_their_assembler(spark, tmp_path):
    """A fitted PipelineModel (VectorAssembler into a forest) and a CrossValidatorModel over it
    are explained on the DataFrame's own columns, which the assembler names: no features=
    mapping. Their values equal the tree stage's alone, mapped by hand, and add up to Spark's
    probabilities; a saved tuning model's estimator and evaluator are not read."""
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import RandomForestClassifier
    from pyspark.ml.evaluation import BinaryClassificationEvaluator
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    columns = ["amount", "age", "hour"]
    frame, df = labelled_rows(spark, columns, seed=11)
    forest = RandomForestClassifier(numTrees=5, maxDepth=4, seed=1, featuresCol="assembled")
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=columns, outputCol="assembled"), forest])
    fitted = pipeline.fit(df)
    tuned = CrossValidator(
        estimator=pipeline,
        estimatorParamMaps=ParamGridBuilder().addGrid(forest.maxDepth, [2, 4]).build(),
        evaluator=BinaryClassificationEvaluator(),
        numFolds=2,
        seed=1,
    ).fit(df)
    rows = pa.Table.from_pandas(frame[columns])
    for model, tree_stage in ((fitted, fitted.stages[-1]), (tuned, tuned.bestModel.stages[-1])):
        explainer = shapfusion.Explainer(model)
        assert explainer.feature_names == columns
        want = explainer.shap_values(rows, as_arrow=True)
        alone = shapfusion.Explainer(tree_stage).shap_values(rows.rename_columns(["f0", "f1", "f2"]))
        np.testing.assert_array_equal(explainer.shap_values(rows), alone)
        got = sfs.to_arrow(sfs.explain(df, model, keep=["id"]).orderBy("id"))
        assert_same(pa.Table.from_struct_array(got.column("shap").combine_chunks()), want, type(model).__name__)
        probability = np.array([r.probability.toArray() for r in model.transform(df).orderBy("id").select("probability").collect()])
        np.testing.assert_allclose(alone.sum(axis=2), probability, atol=1e-9)
    tuned.write().save(str(tmp_path / "tuned"))
    read = [path for path, _ in shapfusion._directory_files(str(tmp_path / "tuned"))]
    assert read and all(p.startswith(("bestModel/", "metadata/")) for p in read), read
    assert any("/stages/" in p and "/data/" in p for p in read), read


def test_a_fitted_pipeline_runs_its_stages_before_the_assembler_on_raw_rows(spark):
    """The committed pipeline (StringIndexer, VectorAssembler, GBT), loaded as a fitted object,
    explains rows holding the raw string column: its indexer runs first. The values equal the
    saved directory's on the indexed rows, bit for bit."""
    from pyspark.ml import PipelineModel

    path = FIXTURES / "spark_pipeline_gbt" / "model"
    fitted = PipelineModel.load(str(path))
    table = pq.read_table(FIXTURES / "spark_pipeline_gbt" / "input.parquet")
    labels = fitted.stages[0].labels
    raw = table.drop_columns(["city_index"]).append_column("city", pa.array([labels[int(i)] for i in table.column("city_index").to_pylist()]))
    raw = raw.append_column("id", pa.array(range(raw.num_rows), pa.int64()))
    got = sfs.to_arrow(sfs.explain(spark.createDataFrame(raw.to_pandas()), fitted, keep=["id"]).orderBy("id"))
    want = shapfusion.Explainer(str(path)).shap_values(table, as_arrow=True)
    assert_same(pa.Table.from_struct_array(got.column("shap").combine_chunks()), want, "raw rows through the indexer")
    with pytest.raises(ValueError, match="lacks the model's feature column.*'city_index'"):
        sfs.explain(spark.createDataFrame(raw.to_pandas()), str(path))  # a directory's stages are not run


def test_an_xgboost_spark_pipeline_runs_its_indexer_and_adds_up_to_its_raw_prediction(spark):
    """A fitted pipeline of StringIndexer, VectorAssembler and an xgboost.spark classifier,
    explained on rows with the raw string column: the features take the assembled columns'
    names, and each row adds up to XGBoost's margin, Spark's rawPrediction[1] (float32)."""
    xgboost_spark = pytest.importorskip("xgboost.spark")
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import StringIndexer, VectorAssembler

    rng = np.random.default_rng(5)
    X, city = rng.normal(size=(200, 2)), np.array(["a", "b", "c"])[rng.integers(0, 3, 200)]
    label = ((X[:, 0] > 0) ^ (city == "b")).astype(float)
    rows = [(i, float(x), float(z), str(k), float(t)) for i, ((x, z), k, t) in enumerate(zip(X, city, label))]
    df = spark.createDataFrame(rows, ["id", "x", "z", "city", "label"])
    fitted = Pipeline(
        stages=[
            StringIndexer(inputCol="city", outputCol="city_index"),
            VectorAssembler(inputCols=["x", "z", "city_index"], outputCol="features"),
            xgboost_spark.SparkXGBClassifier(n_estimators=4, max_depth=3, num_workers=1),
        ]
    ).fit(df)
    assert shapfusion.Explainer(fitted).feature_names == ["x", "z", "city_index"]
    values = sfs.to_arrow(sfs.explain(df, fitted, keep=["id"]).orderBy("id")).column("shap").combine_chunks()
    total = sum(np.array(values.field(name).to_pylist()) for name in ["x", "z", "city_index", "bias"])
    raw = np.array([r.rawPrediction.toArray()[1] for r in fitted.transform(df).orderBy("id").select("rawPrediction").collect()])
    np.testing.assert_allclose(total, raw, atol=1e-5)


def test_fitted_pyspark_models_are_taken_as_they_are_and_their_explainers_pickle(spark):
    """shap's TreeExplainer takes a fitted pyspark.ml model object; so do shapfusion's (through
    the model's own saved form), and the explainer pickles (shap's users ship it to executors)
    without the JVM-bound model. The values add up to Spark's own predictions."""
    import pickle

    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.regression import GBTRegressor

    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 3))
    y = X[:, 0] - 2 * X[:, 1] * (X[:, 2] > 0)
    df = spark.createDataFrame([(*map(float, row), float(t)) for row, t in zip(X, y)], ["a", "b", "c", "label"])
    df = VectorAssembler(inputCols=["a", "b", "c"], outputCol="features").transform(df)
    model = GBTRegressor(maxIter=5, maxDepth=3).fit(df)
    explainer = shapfusion.TreeExplainer(model)
    values = explainer.shap_values(X[:20])
    predictions = np.array([r.prediction for r in model.transform(df.limit(20)).select("prediction").collect()])
    np.testing.assert_allclose(values.sum(axis=1) + explainer.expected_value, predictions, atol=1e-9)
    again = pickle.loads(pickle.dumps(explainer))
    np.testing.assert_array_equal(again.shap_values(X[:20]), values)
    np.testing.assert_array_equal(shapfusion.Explainer(model).shap_values(X[:20])[:, :-1], values)
