"""The data and the checks behind scripts/ballista-test.sh.

make-data: copies of examples/data/payments.parquet with new ids, as a Parquet table of N files.
check: through the Flight SQL gateway (`serve --ballista`) of the compose `ballista` profile,
`SELECT id, shap(...)` over the table equals a local `explain` row for row, a GROUP BY over the
attributions equals the sums of the local values, and killing an executor mid-query loses no
row (Ballista runs the lost tasks again elsewhere).
"""

import argparse
import os
import shutil
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

PAYMENTS = os.path.join(ROOT, "examples/data/payments.parquet")


def make_data(data, rows, files):
    """data/payments.parquet, and data/big/part-*.parquet: `rows` rows whose id is
    copy * len(payments) + position, so row `id` has the features of payments row id % len."""
    shutil.copy(PAYMENTS, os.path.join(data, "payments.parquet"))
    base = pq.read_table(PAYMENTS)
    n = base.num_rows
    copies = -(-rows // n)
    positions = pa.array(range(n), pa.int64())
    table = pa.concat_tables(
        [base.set_column(base.schema.get_field_index("id"), "id", pc.add(positions, k * n)) for k in range(copies)]
    ).slice(0, rows)
    os.makedirs(os.path.join(data, "big"), exist_ok=True)
    per_file = -(-rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * per_file, per_file), os.path.join(data, "big", f"part-{i:02d}.parquet"))
    print(f"wrote {rows} rows in {files} files to {data}/big")


def positions(ids, n):
    """id % n: the payments row each id is a copy of (integer division truncates)."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    return pc.subtract(ids, pc.multiply(pc.divide(ids, n), n))


def check_rows(got, local, what):
    """`got` (id, s) against the local attributions of payments row id % len(payments)."""
    ids = got["id"].combine_chunks()
    want = local.drop_columns(["id"]).take(positions(ids, local.num_rows))
    shap = pa.Table.from_struct_array(got["s"].combine_chunks())
    assert shap.column_names == want.column_names, f"{what}: columns {shap.column_names}"
    for name in shap.column_names:
        assert shap[name].combine_chunks().equals(want[name].combine_chunks()), f"{what}: column {name} differs"
    assert pc.all(pc.equal(ids, pa.array(range(got.num_rows), pa.int64()))).as_py(), f"{what}: ids are not 0..{got.num_rows - 1}"
    print(f"ok: {what}: {got.num_rows} rows identical to local explain")


def check(args):
    # The ADBC client and the checks shared with cluster_check.py (imported here: make-data
    # needs only pyarrow).
    import flight_sql
    from cluster_check import check_token_required, local_explain, query_across_kill

    token = open(args.token_file).readline().strip()
    local = local_explain(args.bin)

    check_token_required(args.server, "the gateway")

    select = f"SELECT id, shap('fraud', {flight_sql.FEATURES}) AS s FROM big ORDER BY id"
    with flight_sql.connect(args.server, token) as conn:
        flight_sql.query(conn, "CREATE EXTERNAL TABLE big STORED AS PARQUET LOCATION '/data/big/'")
        started = time.time()
        got = flight_sql.query(conn, select)
        seconds = time.time() - started
        assert got.num_rows == args.rows, f"{got.num_rows} rows, want {args.rows}"
        check_rows(got, local, f"SELECT shap() over {args.rows} rows on the cluster ({seconds:.1f}s, {args.rows / seconds:.0f} rows/s)")

        grouped = flight_sql.query(
            conn,
            f"SELECT country_code, COUNT(*) AS n, SUM(shap('fraud', {flight_sql.FEATURES})['amount']) AS total "
            "FROM big GROUP BY country_code ORDER BY country_code",
        )
        rows = positions(got["id"], local.num_rows)
        expanded = local.take(rows)
        codes = pq.read_table(PAYMENTS).sort_by("id")["country_code"].take(rows)
        want = pa.table({"country_code": codes, "amount": pc.cast(expanded["amount"], pa.float64())}).group_by("country_code").aggregate(
            [("amount", "sum"), ("amount", "count")]).sort_by("country_code")
        assert grouped["country_code"].to_pylist() == want["country_code"].to_pylist(), "GROUP BY: other groups"
        assert grouped["n"].to_pylist() == want["amount_count"].to_pylist(), "GROUP BY: other counts"
        for g, w in zip(grouped["total"].to_pylist(), want["amount_sum"].to_pylist()):
            assert abs(g - w) <= 1e-9 * max(1.0, abs(w)), f"GROUP BY: sum {g} vs {w}"
        print(f"ok: GROUP BY over the attributions: {grouped.num_rows} groups equal the local sums")

        # Kill an executor a third of the way into the same query.
        got, seconds = query_across_kill(conn, select, args.kill, max(1.0, seconds / 3), "executor")
        check_rows(got, local, f"the query across an executor kill ({seconds:.1f}s)")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make-data")
    m.add_argument("--data", required=True)
    m.add_argument("--rows", type=int, default=1_000_000)
    m.add_argument("--files", type=int, default=8)
    c = sub.add_parser("check")
    c.add_argument("--server", required=True)
    c.add_argument("--bin", required=True)
    c.add_argument("--kill", required=True, help="container id of the executor to kill")
    c.add_argument("--token-file", required=True)
    c.add_argument("--rows", type=int, default=1_000_000)
    args = p.parse_args()
    if args.command == "make-data":
        make_data(args.data, args.rows, args.files)
    else:
        check(args)


if __name__ == "__main__":
    main()
