"""The checks behind scripts/cluster-test.sh, run from the host against the compose cluster:
a Flight SQL query equals a local `explain`; killing a worker mid-query loses no rows."""

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import flight_sql  # noqa: E402  (the example client)


def local_explain(binary):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "local.parquet")
        subprocess.run(
            [binary, "explain", "--model", os.path.join(ROOT, "examples/models/fraud.json"),
             "--input", os.path.join(ROOT, "examples/data/payments.parquet"), "--output", out, "--keep", "id", "--no-progress"],
            check=True,
        )
        return pq.read_table(out).sort_by("id")


def check_same(shap: pa.Table, want: pa.Table, what: str):
    assert shap.num_rows == want.num_rows, f"{what}: {shap.num_rows} rows, want {want.num_rows}"
    for name in shap.column_names:
        assert shap[name].combine_chunks().equals(want[name].combine_chunks()), f"{what}: column {name} differs"
    print(f"ok: {what}: {shap.num_rows} rows identical to local explain")


def check_token_required(server, what):
    """A client without the token is refused, with a message that says why."""
    refused = None
    try:
        with flight_sql.connect(server) as anonymous:
            flight_sql.query(anonymous, "SELECT 1")
    except Exception as e:  # noqa: BLE001 (the ADBC error classes vary between versions)
        refused = str(e)
    assert refused is not None, f"{what} answered a client without the token"
    assert "token" in refused.lower() or "unauthenticated" in refused.lower(), refused
    print("ok: a client without the token is refused")


def query_across_kill(conn, sql, container, after, what):
    """Runs `sql` while `docker kill`ing `container` `after` seconds in; returns the result and
    the query's seconds (raises what the query raised)."""
    result = {}

    def run():
        started = time.time()
        try:
            result["table"] = flight_sql.query(conn, sql)
        except Exception as e:  # noqa: BLE001 (re-raised below)
            result["error"] = e
        result["seconds"] = time.time() - started

    query = threading.Thread(target=run)
    query.start()
    time.sleep(after)
    assert query.is_alive(), f"the query finished before a {what} could be killed"
    subprocess.run(["docker", "kill", container], check=True, stdout=subprocess.DEVNULL)
    print(f"killed {what} {container[:12]} during the query")
    query.join()
    if "error" in result:
        raise result["error"]
    return result["table"], result["seconds"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--bin", required=True)
    p.add_argument("--kill", required=True, help="container id of the worker to kill")
    p.add_argument("--repeat", type=int, default=30, help="copies of the data in the long query")
    p.add_argument("--token-file", required=True, help="the cluster's bearer token")
    args = p.parse_args()
    token = open(args.token_file).readline().strip()
    local = local_explain(args.bin)
    want = local.drop_columns(["id"])

    check_token_required(args.server, "the coordinator")

    with flight_sql.connect(args.server, token) as conn:
        got = flight_sql.query(conn, f"SELECT id, shap('fraud', {flight_sql.FEATURES}) AS s FROM payments ORDER BY id")
        check_same(pa.Table.from_struct_array(got["s"].combine_chunks()), want, "Flight SQL query on the cluster")

        # Copies of the table via UNION ALL (not a join, which would hand the UDF tiny batches).
        long_sql = " UNION ALL ".join(
            f"SELECT {k} AS copy, id, shap('fraud', {flight_sql.FEATURES}) AS s FROM payments" for k in range(args.repeat)
        ) + " ORDER BY copy, id"
        got, seconds = query_across_kill(conn, long_sql, args.kill, 2.0, "worker")
        expected = pa.concat_tables([want] * args.repeat)
        check_same(pa.Table.from_struct_array(got["s"].combine_chunks()), expected, f"long query across a worker kill ({seconds:.1f}s)")


if __name__ == "__main__":
    main()
