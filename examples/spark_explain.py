"""On Spark: explain a Spark DataFrame with shapfusion, as a DataFrame function and in Spark SQL.

    pip install ./python pyspark pyarrow pandas     # Java 17 on the machine
    python examples/spark_explain.py

It starts a local Spark session (2 task slots), reads the shipped payments as a Spark DataFrame,
explains them with the shipped fraud model through `shapfusion.spark.explain` (mapInArrow) and
through a registered SQL function, and checks both against `shapfusion.Explainer` on the same
rows, bit for bit. A run that ends with "ok" has shown it works.
"""

import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

import shapfusion
import shapfusion.spark

HERE = Path(__file__).resolve().parent
MODEL = str(HERE / "models" / "fraud.json")
PAYMENTS = str(HERE / "data" / "payments.parquet")

# Spark's Python workers must run a Python with shapfusion installed: on a cluster,
# PYSPARK_PYTHON names the executors' environment; here it is this interpreter.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
spark = SparkSession.builder.master("local[2]").appName("shapfusion-example").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")

# 1. A DataFrame in, a DataFrame out: the kept columns and one struct of attributions.
payments = spark.read.parquet(PAYMENTS)
explained = shapfusion.spark.explain(payments, MODEL, keep=["id"])
explained.printSchema()
top = explained.orderBy(explained["shap.amount"].desc()).select("id", "shap.amount", "shap.bias").limit(5)
top.show()

# 2. The same numbers as shapfusion.Explainer on the same rows (bit for bit).
local = shapfusion.Explainer(MODEL).shap_values(pq.read_table(PAYMENTS), as_arrow=True)
got = shapfusion.spark.to_arrow(explained.orderBy("id"))
values = pa.Table.from_struct_array(got.column("shap").combine_chunks())
order = pq.read_table(PAYMENTS).column("id").to_pylist()
assert got.column("id").to_pylist() == sorted(order)
by_id = {i: r for r, i in enumerate(order)}
rows = [by_id[i] for i in got.column("id").to_pylist()]
for name in local.schema.names:
    assert values.column(name).to_pylist() == local.column(local.schema.get_field_index(name)).take(rows).to_pylist(), name
print(f"{got.num_rows:,} payments explained on Spark, equal to shapfusion.Explainer")

# 3. Spark SQL: the model's features in its order, the same struct.
shapfusion.spark.register(spark, "fraud_shap", MODEL)
payments.createOrReplaceTempView("payments")
features = ", ".join(shapfusion.Explainer(MODEL).feature_names)
sql = shapfusion.spark.to_arrow(spark.sql(f"SELECT id, fraud_shap({features}) AS shap FROM payments ORDER BY id"))
assert pa.Table.from_struct_array(sql.column("shap").combine_chunks()).equals(values)
print("Spark SQL: fraud_shap(...) gives the same values")

spark.stop()
print("ok")
