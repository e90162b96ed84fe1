"""Serving benchmark: what a `shapfusion worker` costs online and under load.

    python benchmarks/serving.py --bin target/release/shapfusion [--spec medium-8f | --model PATH] [--write]

`--sessions` runs only the session measurements (latency and concurrent clients) and prints
them. `--small-calls` runs only 1-, 2- and 4-row requests, interleaved (one row walks alone, two to
four in a lane group of four), and prints their latencies. `--concurrent 1,2,4,8` runs only
part 2 below, for each client count, and prints requests/s with the share of requests the worker
computed in one engine call with others that waited with them (`stats`' `joined_batches`).

1. Latency: one pyarrow.flight client (a connection per size) sends requests of 1, 10, 100 and
   1,000 rows thousands of times in a row to an idle worker; p50/p99 of the round trip (the
   client's wall time, so an upper bound of the server's). Then the same one-row requests to a
   pyarrow echo server (no model, no shapfusion) in the same run: what the client, gRPC and a
   minimal server cost on this host, beside the worker's one row. Then requests of 1, 10 and
   100 rows over one open session (one DoExchange with the `shapfusion-session: 1` header, each
   batch a request answered before the next is sent), and one-row requests over an open
   exchange with the echo server: what a request costs a client that keeps its stream open.
2. Concurrent one-row clients: 8 clients, each on its own connection, each sending 1-row
   requests back to back for a fixed time (online serving); requests/s and p50/p99; then the
   same with each client over its own open session.
3. Load: 64 clients, each on its own connection, send 2 requests of 20,000 rows at the same
   moment to one worker with default limits (requests beyond the cores queue); per-request
   latency p50/p99, rows/s over the whole burst, refusals, and the worker's peak RSS (VmHWM).

Every reply is checked against the first one for the same rows (bit for bit), so a fast wrong
answer does not count. `--write` puts the tables at the top of RESULTS.md's SERVING section (between its LATEST markers)
and keeps the run they replace, and everything else in the section, below them.
Needs pyarrow (tests/requirements-clients.txt).
"""

import argparse
import functools
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from datetime import date

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

import machine  # benchmarks/machine.py, same directory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_worker(binary, model, extra=()):
    proc = subprocess.Popen(
        [binary, "worker", "--listen", "127.0.0.1:0", "--device", "cpu", "--model", f"m={model}", "--log", "warn", *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    match = re.search(r"listening on (http://\S+)", line)
    if not match:
        proc.kill()
        sys.exit(f"the worker did not start: {line!r}")
    return proc, match.group(1).replace("http://", "grpc://")


def rows(names, n, seed):
    rng = np.random.default_rng(seed)
    columns = [pa.array(np.where(rng.random(n) < 0.02, np.nan, rng.normal(size=n) * 3)) for _ in names]
    return pa.RecordBatch.from_arrays(columns, names=names)


DESCRIPTOR = flight.FlightDescriptor.for_command(b'{"model": "m", "output": "shap"}')


def exchange(client, batch):
    writer, reader = client.do_exchange(DESCRIPTOR)
    writer.begin(batch.schema)
    writer.write_batch(batch)
    writer.done_writing()
    table = reader.read_all()
    writer.close()
    return table


@functools.cache
def load_example(name):
    """A module of `examples/` (the Flight client's `Session`: what a user's code would run)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def open_session(client, schema):
    """One open session with the worker (or the echo server) for model `m`'s SHAP values."""
    return load_example("flight_client").Session(client, "m", schema)


ECHO_ROW = "1 row to a pyarrow echo server instead (no model, no shapfusion: the client's, gRPC's and a minimal server's own cost)"
ECHO_SESSION_ROW = "1 row over an open exchange with the pyarrow echo server instead"

LATEST_BEGIN, LATEST_END = "<!-- SERVING:LATEST BEGIN -->", "<!-- SERVING:LATEST END -->"


def with_latest_run(results, block):
    """RESULTS.md's text with `block` (LATEST markers included) as the SERVING section's latest
    run. The run it replaces moves just below it as an earlier run, so that `--write` never loses
    a measurement, nor the investigations written by hand further down the section."""
    latest = re.compile(re.escape(LATEST_BEGIN) + r"\n(.*?)\n" + re.escape(LATEST_END), re.S)
    found = latest.search(results)
    if found:
        earlier = f"\n\n**An earlier run (moved here by `serving.py --write`):** {found.group(1)}"
        return results[: found.start()] + block + earlier + results[found.end():]
    if "<!-- SERVING:BEGIN -->" in results:
        return results.replace("<!-- SERVING:BEGIN -->", "<!-- SERVING:BEGIN -->\n" + block + "\n", 1)
    return results + f"\n## Serving: latency and load (`benchmarks/serving.py`)\n\n<!-- SERVING:BEGIN -->\n{block}\n<!-- SERVING:END -->\n"


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q))


class EchoServer(flight.FlightServerBase):
    """A pyarrow Flight server that sends each DoExchange's rows back: no model and no
    shapfusion, so one exchange with it is what the pyarrow client, gRPC and a minimal server
    cost on this host (the reference part 1 states beside the worker's one row)."""

    def do_exchange(self, context, descriptor, reader, writer):
        # Batch by batch, so that a client keeping the exchange open gets each back at once.
        begun = False
        for chunk in reader:
            if not begun:
                writer.begin(chunk.data.schema)
                begun = True
            writer.write_batch(chunk.data)


def serve_echo():
    """Runs an EchoServer on a free loopback port, printing the port first (`--echo-server`)."""
    server = EchoServer("grpc://127.0.0.1:0")
    print(server.port, flush=True)
    server.serve()


def echo_latency(names, count, measure=None):
    """One-row round trips to an EchoServer in a process of its own (its Python apart from the
    client's, as the worker's is), measured by `measure` (default `interleaved_latency`) as it
    measures the worker."""
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--echo-server"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        return (measure or interleaved_latency)(f"grpc://127.0.0.1:{port}", names, [1], count)[0]
    finally:
        proc.terminate()
        proc.wait()


def latency(url, names, sizes, count):
    """p50/p99 round trip of `count` back-to-back requests of each size in turn, each size on a
    fresh connection after a warm-up; every reply checked against the first for its rows."""
    return [row for n in sizes for row in interleaved_latency(url, names, [n], count)]


def interleaved_latency(url, names, sizes, count):
    """Like `latency`, but one request of each size in turn, `count` rounds: a machine whose speed
    drifts slows every size alike, so sizes that take different code paths (one row alone, two
    to four rows in a lane group of four) compare fairly."""
    client = flight.connect(url)
    batches = {n: rows(names, n, seed=n) for n in sizes}
    wants = {n: exchange(client, b) for n, b in batches.items()}
    for _ in range(50):  # warm-up: connection, engine, caches
        for b in batches.values():
            exchange(client, b)
    times = {n: [] for n in sizes}
    for _ in range(count):
        for n, b in batches.items():
            start = time.perf_counter()
            got = exchange(client, b)
            times[n].append(time.perf_counter() - start)
            assert got.equals(wants[n]), "a reply differs from the first one for the same rows"
    client.close()
    return [(n, count, percentile(times[n], 50) * 1e3, percentile(times[n], 99) * 1e3) for n in sizes]


def session_latency(url, names, sizes, count):
    """Like `interleaved_latency`, over one open session: one request of each size in turn,
    `count` rounds, each reply read before the next request is sent and checked against the
    reply of an exchange of its own."""
    client = flight.connect(url)
    batches = {n: rows(names, n, seed=n) for n in sizes}
    wants = {n: exchange(client, b) for n, b in batches.items()}
    session = open_session(client, next(iter(batches.values())).schema)
    for _ in range(50):  # warm-up
        for b in batches.values():
            session.explain(b)
    times = {n: [] for n in sizes}
    for _ in range(count):
        for n, b in batches.items():
            start = time.perf_counter()
            got = session.explain(b)
            times[n].append(time.perf_counter() - start)
            assert got.equals(wants[n]), "a session's reply differs from the exchange's for the same rows"
    session.close()
    client.close()
    return [(n, count, percentile(times[n], 50) * 1e3, percentile(times[n], 99) * 1e3) for n in sizes]


def run_clients(url, batch, clients, per_client, body, warm_up=False):
    """Opens `clients` connections and runs `body(client, want)` in `per_client` threads on each,
    released together; `want` is `batch`'s answer on a connection of its own (what every reply
    is checked against). With `warm_up`, each connection exchanges once first (its first call
    sets up the stream). Returns (`want`, the wall seconds from release to the last join)."""
    want = exchange(flight.connect(url), batch)
    connections = [flight.connect(url) for _ in range(clients)]
    if warm_up:
        for c in connections:
            exchange(c, batch)
    start_line = threading.Barrier(clients * per_client)

    def released(client):
        start_line.wait()
        body(client, want)

    threads = [threading.Thread(target=released, args=(c,)) for c in connections for _ in range(per_client)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return want, time.perf_counter() - began


def concurrent_single_rows(url, names, clients, seconds, sessions=False):
    """`clients` connections each sending 1-row requests back to back for `seconds`: each a
    call of its own, or with `sessions` each over the client's own open session."""
    batch = rows(names, 1, seed=11)
    latencies, wrong = [], []
    lock = threading.Lock()

    def one(client, want):
        mine = []
        session = open_session(client, batch.schema) if sessions else None
        ask = session.explain if session else lambda b: exchange(client, b)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            start = time.perf_counter()
            got = ask(batch)
            mine.append(time.perf_counter() - start)
            if not got.equals(want):
                with lock:
                    wrong.append(1)
        if session:
            session.close()
        with lock:
            latencies.extend(mine)

    run_clients(url, batch, clients, 1, one, warm_up=True)
    return {
        "clients": clients,
        "requests": len(latencies),
        "wrong": len(wrong),
        "requests_per_second": len(latencies) / seconds,
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
    }


def joined_batches(url):
    """The worker's count of input batches computed together with other requests' (`stats`)."""
    client = flight.connect(url)
    try:
        body = next(iter(client.do_action(flight.Action("stats", b"")))).body.to_pybytes()
    finally:
        client.close()
    return json.loads(body).get("joined_batches", 0)


def load(url, names, clients, per_client, n):
    batch = rows(names, n, seed=7)
    latencies, refused, wrong = [], [], []
    lock = threading.Lock()

    def one(client, want):
        start = time.perf_counter()
        try:
            got = exchange(client, batch)
            ok = got.equals(want)
        except flight.FlightError as e:  # refusals are counted, not hidden
            with lock:
                refused.append(str(e))
            return
        with lock:
            latencies.append(time.perf_counter() - start)
            if not ok:
                wrong.append(1)

    _, wall = run_clients(url, batch, clients, per_client, one)
    answered = len(latencies)
    return {
        "requests": clients * per_client,
        "answered": answered,
        "refused": len(refused),
        "wrong": len(wrong),
        "rows_per_second": answered * n / wall,
        "p50_s": percentile(latencies, 50) if latencies else float("nan"),
        "p99_s": percentile(latencies, 99) if latencies else float("nan"),
        "wall_s": wall,
    }


def session_tables(url, names, count, clients, seconds):
    """The session measurements as Markdown tables: latency of 1, 10 and 100 rows over one open
    session beside one row over an open exchange with the echo server, then `clients` one-row
    clients each over its own session. Exits on a wrong answer."""
    lat = session_latency(url, names, [1, 10, 100], count)
    echo = echo_latency(names, count, measure=session_latency)
    many = concurrent_single_rows(url, names, clients, seconds, sessions=True)
    if many["wrong"]:
        sys.exit(f"FAILED: {many['wrong']} wrong answers over sessions")
    lines = [
        "| request over an open session (`shapfusion-session: 1`, one connection) | requests | p50 round trip | p99 round trip |",
        "|---|---|---|---|",
    ]
    for n, done, p50, p99 in lat:
        lines.append(f"| {n} row{'s' if n > 1 else ''} | {done} | {p50:.3f} ms | {p99:.3f} ms |")
    lines += [
        f"| {ECHO_SESSION_ROW} | {echo[1]} | {echo[2]:.3f} ms | {echo[3]:.3f} ms |",
        "",
        "| concurrent 1-row clients, each over its own open session | requests | requests/s | p50 round trip | p99 round trip |",
        "|---|---|---|---|---|",
        (
            f"| {many['clients']} clients for {seconds:.0f} s | {many['requests']:,} | {many['requests_per_second']:,.0f} "
            f"| {many['p50_ms']:.3f} ms | {many['p99_ms']:.3f} ms |"
        ),
    ]
    return "\n".join(lines)


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True, help="the shapfusion binary (a release build)")
    p.add_argument("--spec", default="medium-8f", help="a model of the peer suite (trained on first use, needs benchmarks/requirements.txt)")
    p.add_argument("--model", help="a model file instead of --spec")
    p.add_argument("--count", type=int, default=3000, help="sequential requests per latency size")
    p.add_argument("--single-clients", type=int, default=8, help="concurrent clients sending 1-row requests")
    p.add_argument("--single-seconds", type=float, default=20.0, help="how long the concurrent 1-row clients run")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=2, help="requests per client in the burst")
    p.add_argument("--rows", type=int, default=20_000, help="rows per request in the burst")
    p.add_argument("--write", action="store_true", help="write the tables into benchmarks/RESULTS.md")
    p.add_argument(
        "--small-calls",
        action="store_true",
        help="only requests of 1, 2 and 4 rows, interleaved, --count rounds (the one-row walk against the lane group of four); prints, writes nothing",
    )
    p.add_argument(
        "--concurrent",
        metavar="COUNTS",
        help="only concurrent 1-row clients, for each of these client counts (comma-separated), --single-seconds each, "
        "with the share of requests the worker joined with others; prints, writes nothing",
    )
    p.add_argument(
        "--sessions",
        action="store_true",
        help="only the session measurements: 1, 10 and 100 rows over one open session, the echo server over an open exchange, "
        "and --single-clients clients each over its own session; prints, writes nothing",
    )
    p.add_argument("--max-concurrent", type=int, help="the worker's --max-concurrent (default: its own, the cores)")
    p.add_argument(
        "--max-small-requests",
        type=int,
        help="the worker's --max-small-requests (default: its own; 0 runs every request in a --max-concurrent slot)",
    )
    if sys.argv[1:] == ["--echo-server"]:  # the reference server of `echo_latency`, run by it
        return serve_echo()
    a = p.parse_args()
    if a.model is None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from suite import SPECS, build_model

        a.model = str(build_model(next(s for s in SPECS if s.name == a.spec))[0])

    limits = [(flag, value) for flag, value in [("--max-concurrent", a.max_concurrent), ("--max-small-requests", a.max_small_requests)] if value is not None]
    proc, url = start_worker(a.bin, a.model, [str(x) for pair in limits for x in pair])
    try:
        client = flight.connect(url)
        info = client.get_flight_info(flight.FlightDescriptor.for_command(b'{"model": "m"}'))
        names = json.loads(info.app_metadata)["features"]
        client.close()
        if a.concurrent:
            print("| concurrent 1-row clients | requests | requests/s | p50 round trip | p99 round trip | joined with others |")
            print("|---|---|---|---|---|---|")
            for clients in [int(c) for c in a.concurrent.split(",")]:
                before = joined_batches(url)
                r = concurrent_single_rows(url, names, clients, a.single_seconds)
                joined = joined_batches(url) - before
                # The warm-up requests (one a client) are counted by the worker too.
                share = joined / (r["requests"] + clients)
                print(f"| {clients} | {r['requests']:,} | {r['requests_per_second']:,.0f} | {r['p50_ms']:.3f} ms | {r['p99_ms']:.3f} ms | {share:.0%} |")
                if r["wrong"]:
                    sys.exit(f"FAILED: {r['wrong']} wrong answers with {clients} clients")
            return
        if a.sessions:
            print(session_tables(url, names, a.count, a.single_clients, a.single_seconds))
            return
        if a.small_calls:
            print("| request | requests (interleaved, one connection) | p50 round trip | p99 round trip |")
            print("|---|---|---|---|")
            for n, count, p50, p99 in interleaved_latency(url, names, [1, 2, 4], a.count):
                print(f"| {n} row{'s' if n > 1 else ''} | {count} | {p50:.3f} ms | {p99:.3f} ms |")
            _, count, p50, p99 = echo_latency(names, a.count)
            print(f"| {ECHO_ROW} | {count} | {p50:.3f} ms | {p99:.3f} ms |")
            return
        lat = latency(url, names, [1, 10, 100], a.count) + latency(url, names, [1000], max(a.count // 10, 100))
        echo = echo_latency(names, a.count)
        single = concurrent_single_rows(url, names, a.single_clients, a.single_seconds)
        sessions = session_tables(url, names, a.count, a.single_clients, a.single_seconds)
        idle_rss = peak_rss_mib(proc.pid)
        burst = load(url, names, a.clients, a.requests, a.rows)
        rss = peak_rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait()

    model = f"suite {a.spec} ({os.path.relpath(a.model, ROOT)})" if a.spec and "benchmarks/out" in a.model else os.path.relpath(a.model, ROOT)
    cores = os.cpu_count()
    lines = [
        f"Model `{model}`; one worker with default limits on {cores} cores; pyarrow {pa.__version__} clients on the same machine.",
        "",
        "| request | requests (sequential, one connection) | p50 round trip | p99 round trip |",
        "|---|---|---|---|",
    ]
    for n, count, p50, p99 in lat:
        lines.append(f"| {n} row{'s' if n > 1 else ''} | {count} | {p50:.3f} ms | {p99:.3f} ms |")
    lines.append(f"| {ECHO_ROW} | {echo[1]} | {echo[2]:.3f} ms | {echo[3]:.3f} ms |")
    lines += [
        "",
        "| concurrent 1-row clients (each on its own connection, back to back) | requests | requests/s | p50 round trip | p99 round trip |",
        "|---|---|---|---|---|",
        f"| {single['clients']} clients for {a.single_seconds:.0f} s | {single['requests']:,} | {single['requests_per_second']:,.0f} "
        f"| {single['p50_ms']:.3f} ms | {single['p99_ms']:.3f} ms |",
        "",
        sessions,
        "",
        "| burst | answered | refused | rows/s | p50 latency | p99 latency | worker peak RSS |",
        "|---|---|---|---|---|---|---|",
        f"| {a.clients} clients × {a.requests} requests × {a.rows:,} rows, at once | {burst['answered']}/{burst['requests']} "
        f"| {burst['refused']} | {burst['rows_per_second']:,.0f} | {burst['p50_s']:.2f} s | {burst['p99_s']:.2f} s "
        f"| {rss:.0f} MiB (idle after the latency runs: {idle_rss:.0f} MiB) |",
    ]
    text = "\n".join(lines)
    print(text)
    if burst["wrong"] or burst["refused"] or single["wrong"]:
        print(f"FAILED: {burst['wrong'] + single['wrong']} wrong answers, {burst['refused']} refused", file=sys.stderr)
        sys.exit(1)
    if a.write:
        path = os.path.join(ROOT, "benchmarks/RESULTS.md")
        with open(path) as f:
            results = f.read()
        command = " ".join(["python benchmarks/serving.py", *map(shlex.quote, sys.argv[1:])])
        when = f"{date.today().isoformat()}, {machine.describe()}"
        block = f"{LATEST_BEGIN}\nCommand: `{command}` ({when}).\n\n{text}\n{LATEST_END}"
        results = with_latest_run(results, block)
        with open(path, "w") as f:
            f.write(results)


if __name__ == "__main__":
    main()
