"""Explain a Parquet file on a shapfusion worker with pyarrow.flight, and write the attributions.

Start a worker, then run this (from the repository root):

    cargo run --release -- worker --model-dir examples/models --listen 127.0.0.1:50061
    python examples/flight_client.py --worker grpc://127.0.0.1:50061 \
        --model fraud --input examples/data/payments.parquet --output payments_shap.parquet

The exchange: one FlightDescriptor command (JSON naming the model and the output), then our
record batches; the worker streams back one attribution row per input row, in order. Batch
boundaries in the reply may differ from ours (Flight splits large messages); row order and count
are the contract.

`--session-rows N` then explains the first N rows again one at a time over a session (one
exchange kept open with the `shapfusion-session: 1` header, each batch a request answered on its
own: how a service explains decisions as they are made), checking each against the file's
answer.
"""

import argparse
import json
import threading

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq


def call_options(token):
    """Bearer-token header when the worker was started with --token-file."""
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return flight.FlightCallOptions(headers=headers)


def model_features(client, model, options):
    """The worker tells us the model's feature columns (in GetFlightInfo's app_metadata)."""
    descriptor = flight.FlightDescriptor.for_command(json.dumps({"model": model, "output": "shap"}))
    info = client.get_flight_info(descriptor, options)
    return json.loads(info.app_metadata)["features"]


def explain(client, model, table, output="shap", options=None, batch_rows=65536):
    """Streams `table`'s batches to the worker and returns the attributions as a table."""
    options = options or flight.FlightCallOptions()
    descriptor = flight.FlightDescriptor.for_command(json.dumps({"model": model, "output": output}))
    writer, reader = client.do_exchange(descriptor, options)
    # Read while writing: replies flow back as batches are explained, and a client that only
    # reads at the end can stall a large upload once the transport's buffers fill.
    result = {}

    def read_all():
        try:
            result["table"] = reader.read_all()
        except Exception as e:  # surfaced below, in the caller's thread
            result["error"] = e

    receiver = threading.Thread(target=read_all)
    with writer:
        writer.begin(table.schema)
        receiver.start()
        try:
            for batch in table.to_batches(max_chunksize=batch_rows):
                writer.write_batch(batch)
            writer.done_writing()
        except Exception:
            # The worker ended the call first (a refused batch, say): the reader has its error.
            # Close our side, and let the reader finish before the writer is closed: gRPC
            # aborts the process when one call is closed while another thread reads from it.
            try:
                writer.done_writing()
            except Exception:
                pass
            receiver.join()
            if "error" in result:
                raise result["error"] from None
            raise
        receiver.join()
    if "error" in result:
        raise result["error"]
    return result["table"]


class Session:
    """One exchange kept open for many requests (the `shapfusion-session: 1` header): each
    batch sent is explained on its own, and its rows come back before the next is sent. The
    descriptor and schema go once; a request costs one batch each way on the open stream
    instead of a new call."""

    def __init__(self, client, model, schema, output="shap", options=None):
        headers = list((options or flight.FlightCallOptions()).headers)  # the token's, if any
        self.writer, self.reader = client.do_exchange(
            flight.FlightDescriptor.for_command(json.dumps({"model": model, "output": output})),
            flight.FlightCallOptions(headers=[*headers, (b"shapfusion-session", b"1")]),
        )
        self.writer.begin(schema)

    def explain(self, batch):
        """`batch`'s attributions, as a table of as many rows."""
        self.writer.write_batch(batch)
        chunks, rows = [], 0
        while rows < batch.num_rows:
            chunk = self.reader.read_chunk().data
            chunks.append(chunk)
            rows += chunk.num_rows
        return pa.Table.from_batches(chunks)

    def close(self):
        self.writer.done_writing()
        self.reader.read_all()
        self.writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", default="grpc://127.0.0.1:50061")
    p.add_argument("--model", default="fraud")
    p.add_argument("--input", default="examples/data/payments.parquet")
    p.add_argument("--output", default="payments_shap.parquet")
    p.add_argument("--kind", default="shap", choices=["shap", "interactions", "margin"])
    p.add_argument("--keep", default="id", help="input column copied to the output ('' for none)")
    p.add_argument("--token-file")
    p.add_argument("--session-rows", type=int, default=0, help="then explain the first N rows one at a time over a session, checking each")
    args = p.parse_args()

    token = open(args.token_file).readline().strip() if args.token_file else None
    options = call_options(token)
    client = flight.FlightClient(args.worker.replace("http://", "grpc+tcp://"))
    features = model_features(client, args.model, options)
    table = pq.read_table(args.input)
    attributions = explain(client, args.model, table.select(features), args.kind, options)
    assert attributions.num_rows == table.num_rows, "one output row per input row"
    if args.keep:
        attributions = pa.Table.from_arrays(
            [table[args.keep]] + attributions.columns, names=[args.keep] + attributions.column_names
        )
    pq.write_table(attributions, args.output)
    print(f"explained {table.num_rows} rows with {args.model!r} -> {args.output}")
    if args.session_rows:
        rows = table.select(features).slice(0, args.session_rows).to_batches(max_chunksize=1)
        with Session(client, args.model, rows[0].schema, args.kind, options) as session:
            for i, row in enumerate(rows):
                got = session.explain(row)
                want = attributions.slice(i, 1)
                same = all(got[name].equals(want[name]) for name in got.column_names)
                assert same, f"row {i} over the session differs from the file's answer"
        print(f"explained the first {len(rows)} rows one at a time over a session: the same values")


if __name__ == "__main__":
    main()
