"""shap(...) inside Python's datafusion (through datafusion-ffi) against `shapfusion sql` and the
Explainer."""

import os
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shapfusion
from conftest import REPO

MODEL = REPO / "examples" / "models" / "fraud.json"
PAYMENTS = REPO / "examples" / "data" / "payments.parquet"
FEATURES = "amount, age, account_days, hour, tx_24h, merchant_risk, country_code, card_present"

if not shapfusion._shapfusion.HAS_DATAFUSION:
    if os.environ.get("SHAPFUSION_REQUIRE_DATAFUSION") == "1":
        raise RuntimeError("SHAPFUSION_REQUIRE_DATAFUSION=1 but this shapfusion was built without --features datafusion")
    pytest.skip("shapfusion built without --features datafusion", allow_module_level=True)

datafusion = pytest.importorskip("datafusion")


@pytest.fixture()
def ctx():
    ctx = datafusion.SessionContext()
    for udf in shapfusion.datafusion_udfs(models={"fraud": MODEL}):
        ctx.register_udf(udf)
    ctx.register_parquet("payments", str(PAYMENTS))
    return ctx


def test_shap_query_equals_shapfusion_sql(ctx, cli, tmp_path):
    query = f"SELECT id, shap('fraud', {FEATURES}) AS phi, margin('fraud', {FEATURES}) AS margin FROM payments ORDER BY id"
    ours = ctx.sql(query).to_arrow_table()
    out = tmp_path / "sql.parquet"
    subprocess.run(
        [cli, "sql", "-q", "--model", f"fraud={MODEL}", "--format", "parquet", "--output", out,
         "-c", query.replace("FROM payments", f"FROM '{PAYMENTS}'")],
        check=True,
        capture_output=True,
    )
    theirs = pq.read_table(out)
    assert ours.num_rows == 10_000
    assert ours.schema.field("phi").type == theirs.schema.field("phi").type
    assert ours.select(["id", "phi", "margin"]).equals(theirs.select(["id", "phi", "margin"]))


def test_shap_query_equals_the_explainer(ctx):
    table = ctx.sql(f"SELECT shap('fraud', {FEATURES}) AS phi FROM payments ORDER BY id").to_arrow_table()
    phi = table.column("phi").combine_chunks()
    names = [phi.type.field(i).name for i in range(phi.type.num_fields)]
    assert names[-1] == "bias" and len(names) == 9
    from_sql = np.stack([phi.field(i).to_numpy() for i in range(len(names))], axis=1)
    rows = pq.read_table(PAYMENTS).sort_by("id")
    np.testing.assert_array_equal(shapfusion.Explainer(MODEL).shap_values(rows), from_sql)


def test_interactions_and_struct_access(ctx):
    effect = ctx.sql(f"SELECT shap('fraud', {FEATURES})['amount'] AS a FROM payments LIMIT 3").to_arrow_table()
    assert effect.num_rows == 3 and effect.schema.field("a").type == pa.float64()
    inter = ctx.sql(f"SELECT shap_interactions('fraud', {FEATURES}) AS i FROM payments LIMIT 2").to_arrow_table()
    assert inter.num_rows == 2


def test_query_errors_name_the_model_and_its_features(ctx):
    with pytest.raises(Exception, match="takes 8 features in this order: shap\\('<model>', amount, age"):
        ctx.sql("SELECT shap('fraud', amount) FROM payments").collect()
    with pytest.raises(Exception, match="nosuch"):
        ctx.sql(f"SELECT shap('nosuch', {FEATURES}) FROM payments").collect()
    # A query cannot reach a model file the caller did not register (the registered one's own
    # path is the registered model).
    other = REPO / "tests" / "fixtures" / "xgb_regression" / "model.json"
    assert other.is_file()
    with pytest.raises(Exception, match="registered models only: fraud"):
        ctx.sql(f"SELECT shap('{other}', {FEATURES}) FROM payments").collect()


def test_registration_errors_come_early():
    with pytest.raises(FileNotFoundError):
        shapfusion.datafusion_udfs(models={"x": REPO / "no-such-model.json"})


def test_the_datafusion_version_is_checked(monkeypatch):
    monkeypatch.setattr(datafusion, "__version__", "54.1.0")
    with pytest.raises(ImportError, match=r"DataFusion 55\.\d+\.\d+.*installed Python datafusion is 54\.1\.0.*datafusion==55"):
        shapfusion.datafusion_udfs(models={"fraud": MODEL})
