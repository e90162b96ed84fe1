"""``shapfusion.spark``: explain a Spark DataFrame where it lives.

    import shapfusion.spark
    out = shapfusion.spark.explain(payments, "fraud.json", keep=["id"])
    out.select("id", "shap.amount", "shap.bias").show()

    shapfusion.spark.register(spark, "fraud_shap", "fraud.json")
    spark.sql("SELECT id, fraud_shap(amount, age, ...).amount FROM payments")

``explain`` runs ``DataFrame.mapInArrow``: Arrow record batches go to the Python workers and come
back without pandas. The model is read once on the driver and broadcast as bytes; each Python
worker builds one ``shapfusion.Explainer`` per model and thread count and keeps it for every
later task. Features are matched to columns by name (categorical features by their category
names, as everywhere in shapfusion), or read from one Spark ML vector or array column
(``features="features"``); Spark's nulls are missing values.

Threads: each task computes with ``spark.task.cpus`` threads (the slots the scheduler gave it),
so an executor running several tasks is not oversubscribed; ``threads=`` overrides it.

Needs pyspark >= 3.5 (tested on 4.x) and pyarrow. ``register`` makes a SQL function: an Arrow UDF
(``pyspark.sql.functions.arrow_udf``) on Spark 4.1 and later, a pandas UDF on 3.5 and 4.0; both
return the same struct.
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from . import Explainer, _directory_files, _model_source

__all__ = ["explain", "model_payload", "register", "to_arrow"]

#: Outputs and the default name of the column that holds them.
_OUTPUTS = {"shap": "shap", "interactions": "interactions", "margin": "margin"}
# The attribution indices the Explainer takes (see shapfusion.Explainer's index).
_INDICES = ("shapley", "banzhaf")

#: Explainers built in this Python worker, by (content key, threads, transform, device, index), most recently
#: used last. Spark reuses Python workers across tasks (spark.python.worker.reuse), so a model
#: is prepared once per worker, not per task; the oldest go when more than `_CACHE_SIZE` are held.
_CACHE: OrderedDict[tuple[str, int, str, str, str], Explainer] = OrderedDict()
_CACHE_SIZE = 8
_CACHE_LOCK = threading.Lock()


def model_payload(model: Any) -> tuple[str, Any, str]:
    """The model as what a broadcast carries: ``("bytes", file bytes, name)`` for a model file
    or object, ``("spark", [(relative path, bytes), ...], name)`` for a Spark ML model directory
    or a fitted ``pyspark.ml`` model. XGBoost's Spark models (``xgboost.spark``) give their
    booster."""
    source = _model_source(model)
    name = source["name"]
    if "spark_files" in source:
        return "spark", source["spark_files"], name
    if "data" in source:
        return "bytes", source["data"], name
    path = source["path"]
    if os.path.isdir(path):
        return "spark", _directory_files(path), name
    with open(path, "rb") as f:
        return "bytes", f.read(), name


def _content_key(payload: tuple[str, Any, str], background: bytes | None) -> str:
    """A digest of the model's and background's bytes: the same model in another call (or
    another broadcast) finds the explainer a worker already built."""
    digest = hashlib.sha256()
    kind, data, _ = payload
    digest.update(kind.encode())
    for part in [data] if kind == "bytes" else [p.encode() + b"\0" + b for p, b in data]:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    digest.update(background or b"")
    return digest.hexdigest()


def _explainer(
    payload: tuple[str, Any, str],
    key: str,
    threads: int,
    background: bytes | None,
    transform: str = "identity",
    device: str = "cpu",
    index: str = "shapley",
) -> Explainer:
    """This worker's explainer for a broadcast model, built at its first task."""
    cache_key = (key, threads, transform, device, index)
    with _CACHE_LOCK:
        explainer = _CACHE.get(cache_key)
        if explainer is not None:
            _CACHE.move_to_end(cache_key)
        else:
            kind, data, name = payload
            rows = None
            if background is not None:
                import pyarrow as pa

                rows = pa.ipc.open_stream(background).read_all()
            if kind == "spark":
                explainer = Explainer._from_source(
                    {"spark_files": data, "name": name},
                    threads=threads,
                    background=rows,
                    transform=transform,
                    device=device,
                    index=index,
                )
            else:
                explainer = Explainer(data, threads=threads, background=rows, transform=transform, device=device, index=index)
            _CACHE[cache_key] = explainer
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
        return explainer


def _check_choices(output: str, index: str) -> None:
    """Refuses an unknown output or index on the driver, before any task runs."""
    if output not in _OUTPUTS:
        raise ValueError(f"output must be one of {', '.join(_OUTPUTS)}; got {output!r}")
    if index not in _INDICES:
        raise ValueError(f"index must be one of {', '.join(_INDICES)}; got {index!r}")


def _task_threads(threads: int | None) -> int:
    """``threads``, or the cores Spark gave this task (``spark.task.cpus``, 1 by default)."""
    if threads is not None:
        return threads
    from pyspark import TaskContext

    context = TaskContext.get()
    cpus = context.cpus() if context is not None and hasattr(context, "cpus") else 1
    return max(int(cpus or 1), 1)


def to_arrow(df: Any) -> Any:
    """Collects a Spark DataFrame to the driver as a ``pyarrow.Table``: ``DataFrame.toArrow`` on
    Spark 4, and on Spark 3.5 (which lacks it) the Arrow batches its ``toPandas`` collects."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    batches = df._collect_as_arrow()
    return pa.Table.from_batches(batches) if batches else to_arrow_schema(df.schema).empty_table()


def _background_ipc(background: Any, features: Sequence[str]) -> bytes | None:
    """A background (Spark DataFrame, pandas or Arrow) as Arrow IPC bytes for the broadcast."""
    if background is None:
        return None
    import pyarrow as pa

    if hasattr(background, "sparkSession"):  # a Spark DataFrame
        table = to_arrow(background.select(*[c for c in features if c in background.columns]))
    elif hasattr(background, "__arrow_c_stream__"):
        table = pa.table(background)
    else:
        import pandas as pd

        table = pa.Table.from_pandas(
            pd.DataFrame(background, columns=None if hasattr(background, "columns") else list(features)), preserve_index=False
        )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def explain(
    df: Any,
    model: Any,
    features: str | Sequence[str] | dict[str, str] | None = None,
    output: str = "shap",
    background: Any = None,
    keep: Sequence[str] | None = None,
    threads: int | None = None,
    name: str | None = None,
    device: str = "cpu",
    index: str = "shapley",
) -> Any:
    """Attributions of every row of the Spark DataFrame ``df``, as a Spark DataFrame.

    Parameters
    ----------
    df
        The rows. Feature columns are found by the model's feature names; other columns are
        ignored unless kept.
    model
        A model file path (XGBoost, LightGBM, CatBoost JSON, shapfusion trees), a Spark ML model
        directory, a fitted ``pyspark.ml`` tree model (alone, in a ``OneVsRestModel`` or a
        ``PipelineModel``, or tuned), an ``xgboost.spark`` model, or any model
        ``shapfusion.Explainer`` takes. Read once here, on the driver. A fitted pipeline's
        features are the columns its ``VectorAssembler`` assembles; where ``df`` lacks them,
        the pipeline's stages before the assembler are run on it first (a ``StringIndexer``
        making an index column, say).
    features
        The columns holding the model's features when their names differ: a list in the model's
        feature order, or a dict from feature name to column name; or the name of one column
        holding every feature in the model's order, a Spark ML vector (what Spark ML models
        read, dense or sparse) or an array of numbers, each row exactly as long as the model
        has features (a null element is a missing value).
    output
        ``"shap"`` (SHAP values and the bias), ``"interactions"`` or ``"margin"``.
    background
        Rows for interventional SHAP (a Spark, pandas or Arrow table), collected to the driver
        and broadcast with the model; with ``output="interactions"``, interventional
        interaction values.
    keep
        Columns of ``df`` to carry into the result (ids, labels), before the attributions.
    threads
        Engine threads per task; default ``spark.task.cpus``.
    name
        The result column's name (default: ``output``).
    device
        Where each task computes: ``"cpu"``, ``"gpu"`` (the executor's NVIDIA GPU) or
        ``"auto"``, as in :class:`shapfusion.Explainer`.
    index
        ``"shapley"`` (SHAP values, the default) or ``"banzhaf"`` (Banzhaf values), as in
        :class:`shapfusion.Explainer`.

    Returns
    -------
    A DataFrame with the ``keep`` columns and one struct column: a field per feature then
    ``bias`` (arrays of one value per class for multiclass models); for interactions, the
    ``interactions`` matrix; for margins, ``margin``.

    Raises
    ------
    ValueError
        ``df`` lacks a feature column (the message names it and lists ``df``'s columns), or an
        argument is wrong.
    """
    import pyarrow as pa

    _check_choices(output, index)
    keep = list(keep or [])
    payload, model_features, result_type = _prepare(model, output, background is not None)
    # A fitted pipeline's stages before its VectorAssembler make the columns it assembles (a
    # StringIndexer's index, say): run on a DataFrame that lacks them.
    preparation = _stages_before_assembler(model) if features is None else None
    if preparation and not set(model_features) <= set(df.columns):
        from pyspark.ml import PipelineModel

        df = PipelineModel(stages=preparation).transform(df)
    # The schema once, for the checks below and the result's kept fields.
    schema = df.schema
    columns = set(schema.fieldNames())
    # With one features column, the tasks unpack it (the closure ships to them: its name, not a
    # DataFrame).
    vector_column = features if isinstance(features, str) else None
    if vector_column is not None:
        vector = _vector_column(df, vector_column, keep)
        mapping = {f: f for f in model_features}
    else:
        vector = None
        mapping = _feature_columns(model_features, features)
    missing = [
        f"{feature!r} (column {column!r})" if column != feature else repr(feature)
        for feature, column in mapping.items()
        if column not in columns
    ]
    if missing and vector is None:
        vectors = [f.name for f in schema.fields if _is_vector_type(f.dataType)]
        hint = f" (pass features={vectors[0]!r} to read the features from that vector column)" if vectors else ""
        raise ValueError(
            f"the DataFrame lacks the model's feature column(s) {', '.join(missing)}; it has: {', '.join(schema.fieldNames())}{hint}"
        )
    absent = [k for k in keep if k not in columns]
    if absent:
        raise ValueError(
            f"keep names column(s) the DataFrame lacks: {', '.join(absent)}; it has: {', '.join(schema.fieldNames())}"
        )
    column = name or _OUTPUTS[output]
    if column in keep:
        raise ValueError(f"the result column {column!r} is also a kept column; pass name= to call it something else")
    renamed = {column: feature for feature, column in mapping.items() if column != feature}
    # Selected by name and renamed by position, once each: a select still costs two JVM round
    # trips a column (0.07 s on 51 columns), so a DataFrame that already is the kept and feature
    # columns in this order goes as it is.
    feature_columns = list(dict.fromkeys(mapping.values()))
    if vector is not None:
        inputs = vector
    else:
        needed = [*keep, *feature_columns]
        inputs = df if schema.fieldNames() == needed else df.select(*needed)
        if renamed:
            inputs = inputs.toDF(*keep, *[renamed.get(c, c) for c in feature_columns])

    spark = df.sparkSession
    background_ipc = _background_ipc(background, model_features)
    broadcast = spark.sparkContext.broadcast((payload, background_ipc))
    key = _content_key(payload, background_ipc)
    spark_schema = _spark_schema(schema, keep, column, result_type)

    def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        (model_payload_, background_) = broadcast.value
        explainer = _explainer(model_payload_, key, _task_threads(threads), background_, device=device, index=index)
        for batch in batches:
            rows = batch if vector_column is None else _unpacked(batch, vector_column, model_features)
            struct = _spark_struct(explainer._compute(rows, output, True))
            kept = [batch.column(batch.schema.get_field_index(k)) for k in keep]
            yield pa.RecordBatch.from_arrays(kept + [struct], names=keep + [column])

    return inputs.mapInArrow(run, spark_schema)


#: The pyspark.ml and xgboost.spark model classes shapfusion reads as trees (or as a model of
#: them).
_SPARK_TREE_MODELS = frozenset(
    f"{kind}{task}Model" for kind in ("DecisionTree", "RandomForest", "GBT") for task in ("Classification", "Regression")
) | {"OneVsRestModel", "SparkXGBClassifierModel", "SparkXGBRegressorModel", "SparkXGBRankerModel"}


def _stages_before_assembler(model: Any) -> list[Any] | None:
    """For a fitted pyspark.ml pipeline (or a tuning model of one): its stages before the
    VectorAssembler that makes its tree model's features column, which turn the pipeline's
    input into the columns whose names the features take. None for any other model, or where
    there are no such stages."""
    if not (type(model).__module__ or "").startswith("pyspark.ml"):
        return None
    while hasattr(model, "bestModel"):  # CrossValidatorModel, TrainValidationSplitModel
        model = model.bestModel
    stages = list(getattr(model, "stages", None) or [])
    trees = [i for i, stage in enumerate(stages) if type(stage).__name__ in _SPARK_TREE_MODELS]
    if len(trees) != 1:
        return None
    features_column = stages[trees[0]].getFeaturesCol()
    assemblers = [
        i
        for i, stage in enumerate(stages[: trees[0]])
        if type(stage).__name__ == "VectorAssembler" and stage.getOutputCol() == features_column
    ]
    if not assemblers or assemblers[-1] == 0:
        return None
    return stages[: assemblers[-1]]


def _is_vector_type(data_type: Any) -> bool:
    """Whether a Spark type is Spark ML's vector (``pyspark.ml.linalg.VectorUDT``)."""
    return type(data_type).__name__ == "VectorUDT"


def _vector_column(df: Any, column: str, keep: list[str]) -> Any:
    """``df`` as the kept columns and ``column`` (a Spark ML vector or an array of numbers) as an
    array of doubles, for :func:`_unpacked` in each task."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, NumericType

    fields = {f.name: f.dataType for f in df.schema.fields}
    if column not in fields:
        raise ValueError(f"features names the column {column!r}, which the DataFrame lacks; it has: {', '.join(fields)}")
    if column in keep:
        raise ValueError(f"the features column {column!r} is also a kept column")
    data_type = fields[column]
    if _is_vector_type(data_type):
        from pyspark.ml.functions import vector_to_array

        values = vector_to_array(F.col(column), "float64")
    elif isinstance(data_type, ArrayType) and isinstance(data_type.elementType, NumericType):
        values = F.col(column).cast("array<double>")
    else:
        raise ValueError(
            f"features names the column {column!r} of type {data_type.simpleString()}: a Spark ML vector or an array of numbers is read"
        )
    return df.select(*keep, values.alias(column))


def _unpacked(batch: Any, column: str, features: list[str]) -> Any:
    """The features of ``batch``'s list column ``column`` as one column a feature (a null element
    is a missing value); a row of another length, or a null row, is refused naming both."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = batch.column(batch.schema.get_field_index(column))
    if values.null_count:
        raise ValueError(f"column {column!r} is null in {values.null_count} row(s): no features to explain")
    lengths = pc.list_value_length(values)
    if len(values) and (pc.min(lengths).as_py() != len(features) or pc.max(lengths).as_py() != len(features)):
        found = sorted({n for n in lengths.to_pylist() if n != len(features)})
        raise ValueError(
            f"column {column!r} holds rows of {', '.join(map(str, found[:5]))} values; the model has {len(features)} features"
        )
    return pa.RecordBatch.from_arrays([pc.list_element(values, j) for j in range(len(features))], names=features)


def spark_arrays(batch: Any) -> list[Any]:
    """The columns of a shapfusion output batch in types Spark's Arrow reader takes: fixed-size
    lists (one value per class, interaction matrices) become plain lists of the same values."""
    return [_as_list(column) for column in batch.columns]


def _as_list(array: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_fixed_size_list(array.type):
        inner = _as_list(array.flatten())
        size = array.type.list_size
        offsets = pa.array(range(0, size * len(array) + 1, size), pa.int32())
        return pa.ListArray.from_arrays(offsets, inner, mask=array.is_null() if array.null_count else None)
    return array


def _spark_struct(batch: Any) -> Any:
    """A shapfusion output batch as one struct array Spark takes."""
    import pyarrow as pa

    columns = spark_arrays(batch)
    return pa.StructArray.from_arrays(
        columns, fields=[pa.field(f.name, c.type, f.nullable) for f, c in zip(batch.schema, columns)]
    )


def _prepare(model: Any, output: str, background: bool) -> tuple[tuple[str, Any, str], list[str], Any]:
    """On the driver: the model's broadcast payload, its feature names, and the Arrow type of
    the struct ``output`` gives (what the Spark schema is made from). A model whose values need
    a background it does not get (LightGBM linear trees) is refused here, before any task."""
    import pyarrow as pa

    payload = model_payload(model)
    driver = _driver_explainer(payload, background)
    features = list(driver.feature_names)
    empty = driver._compute(pa.table({f: pa.array([], pa.float64()) for f in features}), output, True)
    return payload, features, _spark_struct(empty).type


def _driver_explainer(payload: tuple[str, Any, str], background: bool) -> Explainer:
    """An explainer on the driver, for the model's features and output types (no engine set-up
    to speak of: one thread, the reference engine; with ``background``, one describing a model
    whose values need one too)."""
    kind, data, name = payload
    source = {"spark_files": data, "name": name} if kind == "spark" else {"data": data, "name": name}
    return Explainer._from_source(source, algorithm="treeshap", threads=1, describe=background)


def _feature_columns(model_features: list[str], features: Any) -> dict[str, str]:
    """Feature name → column name."""
    if features is None:
        return {f: f for f in model_features}
    if isinstance(features, dict):
        unknown = [f for f in features if f not in model_features]
        if unknown:
            raise ValueError(
                f"features names {', '.join(map(repr, unknown))}, which the model does not have; its features: {', '.join(model_features)}"
            )
        return {f: features.get(f, f) for f in model_features}
    features = list(features)
    if len(features) != len(model_features):
        raise ValueError(
            f"features lists {len(features)} columns for the model's {len(model_features)} features ({', '.join(model_features)})"
        )
    return dict(zip(model_features, features))


def _spark_schema(schema: Any, keep: list[str], column: str, result_type: Any) -> Any:
    """The result's Spark schema: the kept fields of the input's ``schema``, then the output."""
    from pyspark.sql.types import StructField, StructType

    fields = [schema[k] for k in keep]
    return StructType(fields + [StructField(column, _spark_type(result_type), True)])


def _spark_type(arrow_type: Any, nullable_fields: bool = False) -> Any:
    """Spark's type for the Arrow types shapfusion writes (float64, lists and structs of them).
    ``nullable_fields`` declares every struct field nullable, as a pandas UDF's result is once
    Spark has converted it from pandas."""
    import pyarrow as pa
    from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType

    if pa.types.is_struct(arrow_type):
        return StructType(
            [StructField(f.name, _spark_type(f.type, nullable_fields), f.nullable or nullable_fields) for f in arrow_type]
        )
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return ArrayType(_spark_type(arrow_type.value_type, nullable_fields), True)
    if pa.types.is_floating(arrow_type):
        return DoubleType()
    raise TypeError(f"shapfusion.spark: no Spark type for the output type {arrow_type}")


def register(
    spark: Any,
    name: str,
    model: Any,
    output: str = "shap",
    threads: int | None = None,
    device: str = "cpu",
    index: str = "shapley",
) -> Any:
    """Registers the SQL function ``name(feature1, feature2, ...)`` on ``spark``: the model's
    features in its order, returning the struct ``explain`` writes (SHAP values and bias,
    interactions or the margin). An Arrow UDF on Spark 4.1+, a pandas UDF before. Returns the
    UDF, which DataFrame code can call too. ``threads``, ``device`` and ``index`` as in
    :func:`explain`."""
    import pyarrow as pa
    import pyspark.sql.functions as spark_functions

    # The UDF constructors differ between Spark versions (arrow_udf from 4.1, pandas_udf before),
    # so they are looked up at run time rather than typed against one version.
    F: Any = spark_functions
    _check_choices(output, index)
    payload, model_features, result_type = _prepare(model, output, False)
    broadcast = spark.sparkContext.broadcast((payload, None))
    key = _content_key(payload, None)

    def compute(columns: list[pa.Array]) -> pa.StructArray:
        if len(columns) != len(model_features):
            raise ValueError(
                f"{name}() takes the model's {len(model_features)} features in order ({', '.join(model_features)}); got {len(columns)} arguments"
            )
        explainer = _explainer(broadcast.value[0], key, _task_threads(threads), None, device=device, index=index)
        table = pa.table(dict(zip(model_features, columns)))
        return _spark_struct(explainer._compute(table, output, True))

    if hasattr(F, "arrow_udf"):
        # Spark infers the UDF kind from type hints, which a variadic signature has none of:
        # the scalar kind is named instead.
        def arrow_fn(*columns: Any) -> Any:
            return compute([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns])

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*type hints for arrow UDF.*")
            udf = F.arrow_udf(arrow_fn, _spark_type(result_type), F.ArrowUDFType.SCALAR)
    else:

        def pandas_fn(*columns: Any) -> Any:
            arrays = [pa.Array.from_pandas(c) for c in columns]
            return pa.Table.from_struct_array(compute(arrays)).to_pandas()

        with warnings.catch_warnings():
            # Spark 4 deprecates the explicit kind in favour of type hints, which a variadic
            # signature cannot give.
            warnings.filterwarnings("ignore", category=UserWarning, message=".*type hints for pandas UDF.*")
            udf = F.pandas_udf(pandas_fn, _spark_type(result_type, nullable_fields=True), F.PandasUDFType.SCALAR)
    spark.udf.register(name, udf)
    return udf
