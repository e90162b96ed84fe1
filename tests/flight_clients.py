"""Third-party clients against real shapfusion processes: pyarrow.flight on a worker, ADBC
Flight SQL on `serve` computing through that worker. Both must return exactly what a local
`shapfusion explain` writes. Run by .ci/run:

    python tests/flight_clients.py target/debug/shapfusion
"""

import importlib.util
import os
import subprocess
import sys
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "examples/models/fraud.json")
DATA = os.path.join(ROOT, "examples/data/payments.parquet")


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start(binary, *args):
    """Starts a server on a free port; returns the process and its grpc:// URL."""
    proc = subprocess.Popen([binary, *args, "--listen", "127.0.0.1:0", "--log", "warn"], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if "listening on http://" not in line:
        proc.kill()
        raise SystemExit(f"{args[0]} did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[1].replace("http://", "grpc+tcp://")


def check_same(got: pa.Table, want: pa.Table, what: str):
    assert got.num_rows == want.num_rows, f"{what}: {got.num_rows} rows, want {want.num_rows}"
    for name in want.column_names:
        g, w = got[name].combine_chunks(), want[name].combine_chunks()
        assert g.equals(w), f"{what}: column {name} differs"
    print(f"ok: {what} ({got.num_rows} rows, {len(want.column_names)} columns identical)")


def main(binary):
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write("ci-token\n")
        local_path = os.path.join(tmp, "local.parquet")
        subprocess.run([binary, "explain", "--model", MODEL, "--input", DATA, "--output", local_path, "--no-progress"], check=True)
        local = pq.read_table(local_path)
        try:
            worker, worker_url = start(binary, "worker", "--model-dir", os.path.join(ROOT, "examples/models"), "--token-file", token_file)
            procs.append(worker)

            # pyarrow.flight, through the example client.
            fc = load_example("flight_client")
            client = flight.FlightClient(worker_url)
            try:
                fc.model_features(client, "fraud", flight.FlightCallOptions())
                raise AssertionError("a call without the token was accepted")
            except flight.FlightUnauthenticatedError:
                print("ok: pyarrow.flight without a token is refused")
            options = fc.call_options("ci-token")
            features = fc.model_features(client, "fraud", options)
            table = pq.read_table(DATA)
            check_same(fc.explain(client, "fraud", table.select(features), "shap", options, batch_rows=3000), local, "pyarrow.flight DoExchange")
            # A session: the first rows one at a time over one open exchange, each answered on
            # its own with the bits of the whole file's call, the token carried beside the header.
            rows = table.select(features).slice(0, 40).to_batches(max_chunksize=1)
            with fc.Session(client, "fraud", rows[0].schema, "shap", options) as session:
                got = pa.concat_tables([session.explain(row) for row in rows])
            check_same(got, local.slice(0, len(rows)), "pyarrow.flight, one row at a time over a session")
            try:
                fc.explain(client, "fraud", table.select(features[1:]), "shap", options)
                raise AssertionError("a batch without a feature column was accepted")
            except pa.ArrowInvalid as e:  # InvalidArgument
                assert features[0] in str(e), e
                print("ok: a missing column is named in the error")

            serve, serve_url = start(
                binary, "serve", "--workers", worker_url.replace("grpc+tcp://", "http://"), "--worker-token-file", token_file,
                "--model", f"fraud={MODEL}", "--table", f"payments={DATA}", "--token-file", token_file,
                "--data-root", os.path.dirname(DATA),
            )
            procs.append(serve)

            # ADBC Flight SQL, through the example client.
            fs = load_example("flight_sql")
            with fs.connect(serve_url, "ci-token") as conn:
                result = fs.query(conn, f"SELECT id, shap('fraud', {fs.FEATURES}) AS s FROM payments ORDER BY id")
                shap = pa.Table.from_struct_array(result["s"].combine_chunks())
                check_same(shap, local, "ADBC Flight SQL via the worker pool")
                fs.query(conn, f"CREATE EXTERNAL TABLE p2 STORED AS PARQUET LOCATION '{DATA}'")
                n = fs.query(conn, "SELECT count(*) AS n FROM p2")["n"][0].as_py()
                assert n == local.num_rows, n
                print("ok: CREATE EXTERNAL TABLE over Flight SQL (under --data-root)")
                for attack in ["CREATE EXTERNAL TABLE pw STORED AS CSV LOCATION '/etc/passwd'",
                               "SET shap.workers = 'http://127.0.0.1:1'",
                               "COPY (SELECT 1 AS x) TO '/tmp/shapfusion-adbc.csv' STORED AS CSV"]:
                    try:
                        fs.query(conn, attack)
                        raise AssertionError(f"accepted: {attack}")
                    except AssertionError:
                        raise
                    except Exception as e:  # noqa: BLE001 (the DB-API error class varies by version)
                        assert "not allowed" in str(e) or "may not" in str(e) or "cannot be set" in str(e), e
                print("ok: ADBC cannot read, write or reroute outside what the operator configured")
                top = fs.query(conn, f"SELECT id, shap('fraud', {fs.FEATURES})['amount'] AS e FROM payments ORDER BY e DESC LIMIT 5")
                assert top.num_rows == 5 and pc.max(local["amount"]).as_py() == top["e"][0].as_py()

                # Parameters, bound the DB-API way: `?` in the text, values beside it.
                ids = pq.read_table(DATA, columns=["id"])["id"]
                for row in [0, 1234, local.num_rows - 1]:
                    got = fs.query(conn, f"SELECT shap('fraud', {fs.FEATURES}) AS s FROM payments WHERE id = ?", (ids[row].as_py(),))
                    check_same(pa.Table.from_struct_array(got["s"].combine_chunks()), local.slice(row, 1), f"ADBC with a bound id (row {row})")

                # What a database browser asks: the server, its table types, the session's objects.
                info = conn.adbc_get_info()
                assert info["vendor_name"] == "shapfusion", info
                assert "TABLE" in conn.adbc_get_table_types(), conn.adbc_get_table_types()
                objects = conn.adbc_get_objects(depth="columns").read_all().to_pylist()
                tables = {t["table_name"]: t for c in objects for s in c["catalog_db_schemas"] for t in s["db_schema_tables"]}
                assert {"payments", "p2"} <= set(tables), sorted(tables)
                columns = [c["column_name"] for c in tables["payments"]["table_columns"]]
                assert columns == pq.read_schema(DATA).names, columns
                schema = conn.adbc_get_table_schema("payments")
                assert schema.names == pq.read_schema(DATA).names and schema.types == pq.read_schema(DATA).types, schema
                print(f"ok: ADBC lists the server ({info['vendor_name']} {info.get('vendor_version')}), its table types and the session's "
                      f"tables with their columns ({len(tables)} tables)")
            try:
                with fs.connect(serve_url, "wrong") as conn:
                    fs.query(conn, "SELECT 1")
                raise AssertionError("a wrong token was accepted")
            except AssertionError:
                raise
            except Exception as e:  # the driver's DB-API error class varies by version
                assert "nauthenticated" in str(e) or "token" in str(e), e
                print(f"ok: ADBC with a wrong token is refused ({type(e).__name__})")
        finally:
            for p in procs:
                p.kill()
                p.wait()
    print("flight clients: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/debug/shapfusion"))
