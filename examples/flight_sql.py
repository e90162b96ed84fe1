"""Query `shapfusion serve` over Flight SQL with ADBC: SQL with shap() from any ADBC client.

Start the server (it computes in-process, or on workers with --workers), then run this:

    cargo run --release -- serve --listen 127.0.0.1:50051 \
        --model fraud=examples/models/fraud.json --table payments=examples/data/payments.parquet
    python examples/flight_sql.py --server grpc://127.0.0.1:50051

Tables can also be registered by the client: statements such as CREATE EXTERNAL TABLE go through
the same execute() call as queries. Parameters are written `?` and passed to execute(), as with
any DB-API driver; the server's tables are listed by the driver's own calls (`adbc_get_objects`,
`adbc_get_table_schema`), as database browsers list them.
"""

import argparse

import adbc_driver_flightsql.dbapi as flight_sql

FEATURES = "amount, age, account_days, hour, tx_24h, merchant_risk, country_code, card_present"


def connect(server, token=None):
    """A DB-API connection; the bearer token (if the server wants one) goes in a header."""
    kwargs = {"adbc.flight.sql.authorization_header": f"Bearer {token}"} if token else {}
    return flight_sql.connect(server, db_kwargs=kwargs, autocommit=True)


def query(conn, sql, parameters=None):
    """Runs one statement (with `?` parameters bound from `parameters`) and returns its result
    as a pyarrow Table."""
    with conn.cursor() as cur:
        cur.execute(sql, parameters)
        return cur.fetch_arrow_table()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default="grpc://127.0.0.1:50051")
    p.add_argument("--token-file")
    args = p.parse_args()
    token = open(args.token_file).readline().strip() if args.token_file else None
    with connect(args.server.replace("http://", "grpc+tcp://"), token) as conn:
        top = query(
            conn,
            f"""SELECT id, amount, shap('fraud', {FEATURES})['amount'] AS amount_effect
                FROM payments ORDER BY amount_effect DESC LIMIT 5""",
        )
        print(top)
        # One payment's attributions, its id bound as a parameter: what an online lookup sends.
        one = query(conn, f"SELECT id, shap('fraud', {FEATURES}) AS s FROM payments WHERE id = ?", (top["id"][0].as_py(),))
        assert one.num_rows == 1 and one["s"][0]["amount"].as_py() == top["amount_effect"][0].as_py(), one
        print(f"payment {one['id'][0]}: {one['s'][0]}")


if __name__ == "__main__":
    main()
