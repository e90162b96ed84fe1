"""Spark: explaining a DataFrame the ways teams do it today, against ``shapfusion.spark.explain``,
on the same rows, models and local Spark session (2 cores).

    (a) the pandas-UDF recipe: ``mapInPandas`` with shap's ``TreeExplainer`` per partition, on a
        scikit-learn RandomForestClassifier and on an XGBoost model;
    (b) XGBoost's ``pred_contribs`` in ``mapInPandas``, and XGBoost's own Spark estimator output
        (``xgboost.spark``'s ``pred_contrib_col``) on the same model;
    (c) ``shapfusion.spark.explain`` on both models;
    (d) ``shapfusion.Explainer`` outside Spark, on the same rows in memory;
    (e) Spark's floor: the rows through ``mapInArrow`` into the same struct, no computation.

Every Spark path writes its result to the ``noop`` sink (everything computed, nothing stored);
rows/s is rows over the job's wall time after one warm-up run of the same job: the median of
``--repeats`` runs for (c) and (d), ``--peer-repeats`` runs for the peers, which take minutes.

Rows: one DataFrame of ``--rows`` rows; the peers, and every path on the forest, run on its
first ``--peer-rows``, and the shap recipe on the forest on its first ``--shap-rows`` (two
orders of magnitude slower still). A Spark job has a fixed cost (scheduling, the Python
workers' start) of a few tenths of a second: nothing to a peer's minutes, but a visible share
of a job that explains 200,000 rows in three seconds, so (c), (d) and (e) on the XGBoost model
run on all the rows, and (c) on the peers' rows is reported too. Rows/s is what is compared.

    python benchmarks/spark.py [--rows 1000000] [--peer-rows 200000] [--shap-rows 10000] [--repeats 3] [--peer-repeats 1]
                               [--case all|recipes|wide] [--wide-rows 200000] [--wide-features 50]

The wide case (``--case wide``, also part of ``all``) is the shape where Spark once ran at half
the wheel's speed: ``--wide-rows`` rows of ``--wide-features`` features, an XGBoost model of 100
trees of depth 8, (c) against (d) on the same rows, and where the difference goes: Spark's floor
(e) on the same columns, and the fixed cost of a job (the same jobs on 800 rows); on Linux also
each job's CPU seconds by process (Spark's JVM, the Python workers, the driver; from /proc)
and the machine's idle time, and the bound on (c) that Spark's own CPU time sets.

Needs pyspark (tests/requirements-spark.txt), Java 17, the release wheel and
tests/requirements.txt. Writes the SPARK section of benchmarks/RESULTS.md (the recipes) and
the SPARK WIDE section (the wide case).
"""

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (the machine line of every table)

from python_wheel import median_seconds as timed  # noqa: E402  (a warm-up, then the median)
from suite import write_results_section  # noqa: E402

FEATURES = 20
#: Spark's cores (`local[N]`): the wide case's bound on (c) is its busy core-seconds over these.
SPARK_CORES = 2
#: (c) on the peers' rows: the same job on fewer rows, where Spark's fixed cost per job shows.
C_PEER_ROWS = "(c) shapfusion.spark.explain, on the peers' rows"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows for shapfusion and Spark's floor on the XGBoost model")
    ap.add_argument("--peer-rows", type=int, default=200_000, help="rows for the peers and every path on the forest")
    ap.add_argument("--shap-rows", type=int, default=10_000, help="rows for the shap recipe on the forest")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peer-repeats", type=int, default=1, help="timed runs of the peers (a) and (b), minutes each")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--case", choices=("all", "recipes", "wide"), default="all")
    ap.add_argument("--wide-rows", type=int, default=200_000)
    ap.add_argument("--wide-features", type=int, default=50)
    args = ap.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{SPARK_CORES}]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "6g")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")
        .getOrCreate()
    )
    if args.case in ("all", "wide"):
        wide_case(spark, args)
    if args.case in ("all", "recipes"):
        recipes(spark, args)
    spark.stop()


def data(rows, features):
    """`rows` rows of `features` standard normal features, an `id` column first, and a binary
    label of the first four features."""
    import pandas as pd

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, features))
    y = (X[:, 0] + np.sin(2 * X[:, 1]) + X[:, 2] * X[:, 3] + 0.3 * rng.normal(size=rows) > 0).astype(int)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(features)])
    frame.insert(0, "id", np.arange(rows))
    return frame, y


def noop(frame_):
    """Runs a Spark job that computes every row of `frame_` and stores nothing."""
    frame_.write.format("noop").mode("overwrite").save()


def passthrough_job(df, names):
    """Spark's floor: `df`'s rows through ``mapInArrow`` into a struct of as many doubles as
    ``explain`` writes (the features and a bias), with no computation."""
    import pyarrow as pa

    struct_schema = "id long, shap struct<" + ", ".join(f"{n}: double" for n in names + ["bias"]) + ">"

    def passthrough(batches):
        for batch in batches:
            columns = [batch.column(n) for n in names]
            shap_struct = pa.StructArray.from_arrays(columns + [columns[0]], names=names + ["bias"])
            yield pa.RecordBatch.from_arrays([batch.column("id"), shap_struct], names=["id", "shap"])

    return df.mapInArrow(passthrough, struct_schema)


#: The process groups a wide-case job's CPU time is split into (Linux: from /proc).
CPU_GROUPS = ("jvm", "workers", "driver", "idle")


def cpu_by_group():
    """CPU seconds used so far by Spark's JVM, the Python workers (``pyspark.daemon`` and its
    forks, finished ones included through their parent's ``cutime``) and this driver process,
    and the machine's idle core-seconds; None off Linux."""
    if not os.path.exists("/proc/stat"):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    used = dict.fromkeys(CPU_GROUPS, 0.0)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().decode(errors="replace")
        except OSError:  # the process ended while the table was read
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        own = (int(fields[11]) + int(fields[12])) / tick
        if int(pid) == os.getpid():
            used["driver"] += own
        elif "java" in command:
            used["jvm"] += own
        elif "pyspark" in command:
            # A worker's forks end with their task: the daemon's children's time counts them.
            used["workers"] += own + (int(fields[13]) + int(fields[14])) / tick
    with open("/proc/stat") as f:
        ticks = f.readline().split()[1:]
    used["idle"] = (int(ticks[3]) + int(ticks[4])) / tick
    return used


def timed_with_cpu(call, repeats):
    """A warm-up, then `repeats` runs: the median wall time, and the median CPU seconds a run of
    each group in `CPU_GROUPS` (None off Linux)."""
    time.sleep(1.0)
    call()
    walls, cpus = [], []
    for _ in range(repeats):
        before, start = cpu_by_group(), time.perf_counter()
        call()
        walls.append(time.perf_counter() - start)
        after = cpu_by_group()
        if before is not None and after is not None:
            cpus.append({g: after[g] - before[g] for g in CPU_GROUPS})
    cpu = {g: statistics.median(c[g] for c in cpus) for g in CPU_GROUPS} if cpus else None
    return statistics.median(walls), cpu


def machine_line(args):
    """The machine, Spark setting and package versions a wide-rows table was measured with, and the
    date: the line RESULTS.md prints above the table."""
    import pyspark
    import xgboost

    import shapfusion

    return (
        f"Machine: {machine.describe()}; local Spark `local[{SPARK_CORES}]`, "
        f"{args.partitions} partitions; Python {platform.python_version()}; pyspark {pyspark.__version__}, "
        f"xgboost {xgboost.__version__}, shapfusion {shapfusion.__version__}; {date.today().isoformat()}."
    )


def wide_case(spark, args):
    """(c) against (d) on wide rows, with Spark's floor and a job's fixed cost beside them."""
    import pyarrow as pa
    import xgboost

    import shapfusion
    import shapfusion.spark as sfs

    rows, features = args.wide_rows, args.wide_features
    frame, y = data(rows, features)
    names = list(frame.columns[1:])
    train = min(rows, 50_000)
    booster = xgboost.train(
        {"max_depth": 8, "objective": "binary:logistic", "nthread": 2}, xgboost.DMatrix(frame[names].iloc[:train], y[:train]), 100
    )
    df = spark.createDataFrame(frame).repartition(args.partitions).cache()
    df.count()
    tiny = df.limit(800).repartition(args.partitions).cache()
    tiny.count()
    table = pa.Table.from_pandas(frame, preserve_index=False)
    explainer = shapfusion.Explainer(booster, threads=2)
    jobs = {
        "c": lambda: noop(sfs.explain(df, booster, keep=["id"])),
        "d": lambda: explainer.shap_values(table),
        "e": lambda: noop(passthrough_job(df, names)),
        "c_tiny": lambda: noop(sfs.explain(tiny, booster, keep=["id"])),
        "e_tiny": lambda: noop(passthrough_job(tiny, names)),
    }
    measured = {k: timed_with_cpu(job, args.repeats) for k, job in jobs.items()}
    seconds = {k: wall for k, (wall, _) in measured.items()}
    cpu = {k: used for k, (_, used) in measured.items()}
    print(seconds, cpu, flush=True)
    rate = {k: rows / v for k, v in seconds.items() if not k.endswith("tiny")}
    # Per row: a job's time less the same job's time on 800 rows (its fixed cost).
    per_row = {k: (seconds[k] - seconds[k + "_tiny"]) for k in ("c", "e")}
    share = rate["c"] / rate["d"]
    lines = [
        "## Spark on wide rows: shapfusion.spark.explain against the same wheel outside Spark (benchmarks/spark.py --case wide)",
        "",
        f"Command: `python benchmarks/spark.py --case wide --wide-rows {rows} --wide-features {features} --repeats {args.repeats}` "
        f"(release wheel). {machine_line(args)} {rows:,} rows × {features} features, an XGBoost model of 100 trees of depth 8 "
        "(`xgboost.train`, binary:logistic); each time is the median of the runs after a warm-up. (c) `shapfusion.spark.explain(df, booster, "
        "keep=[\"id\"])` to the `noop` sink, one engine thread a task (`spark.task.cpus`); (d) `shapfusion.Explainer(booster, threads=2)."
        "shap_values` on the same rows as one Arrow table; (e) Spark's floor: the same rows through `mapInArrow` into a struct of as many "
        "doubles, no computation. A job's fixed cost is the same job on 800 rows.",
        "",
        "| path | rows/s | job seconds | seconds on 800 rows |",
        "|---|---:|---:|---:|",
        f"| (c) shapfusion.spark.explain | {rate['c']:,.0f} | {seconds['c']:.2f} | {seconds['c_tiny']:.2f} |",
        f"| (d) shapfusion.Explainer, no Spark | {rate['d']:,.0f} | {seconds['d']:.2f} | |",
        f"| (e) mapInArrow, rows passed through (Spark's floor) | {rate['e']:,.0f} | {seconds['e']:.2f} | {seconds['e_tiny']:.2f} |",
        "",
        f"* (c) against (d): **{share:.0%}** (target: at least 90 %: {'met' if share >= 0.9 else 'NOT met'}).",
        f"* Without each job's fixed cost (its time on 800 rows), (c) takes {per_row['c']:.2f} s against (d)'s {seconds['d']:.2f} s: "
        f"{seconds['d'] / per_row['c']:.0%}; Spark's floor spends {per_row['e']:.2f} s per {rows:,} rows moving them, "
        f"{per_row['e'] / seconds['d']:.0%} of (d)'s time, on the same two cores.",
    ]
    if all(cpu[k] is not None for k in ("c", "d", "e")):
        lines += ["", *cpu_lines(seconds, cpu)]
    write_results_section("SPARK WIDE", "\n".join(lines) + "\n")
    print("\n".join(lines))


def cpu_lines(seconds, cpu):
    """Where Spark's cores' time went in (c), (d) and (e), and what that bounds (c) at."""
    rows = [
        ("(c) shapfusion.spark.explain", "c"),
        ("(d) shapfusion.Explainer, no Spark", "d"),
        ("(e) Spark's floor", "e"),
    ]
    lines = [
        "CPU seconds a job (median of the runs; from /proc: Spark's JVM, the Python workers, this driver process, and the whole machine's idle core-seconds):",
        "",
        "| path | wall seconds | Spark's JVM | Python workers | driver process | idle core-seconds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, k in rows:
        used = cpu[k]
        lines.append(
            f"| {label} | {seconds[k]:.2f} | {used['jvm']:.2f} | {used['workers']:.2f} | {used['driver']:.2f} | {used['idle']:.2f} |"
        )
    busy = cpu["c"]["jvm"] + cpu["c"]["workers"] + cpu["c"]["driver"]
    engine_d = cpu["d"]["driver"]
    lines += [
        "",
        f"* (c)'s engines (the Python workers) used {cpu['c']['workers']:.2f} core-seconds against (d)'s {engine_d:.2f}, and Spark's JVM "
        f"{cpu['c']['jvm']:.2f} beside them (the floor (e): {cpu['e']['jvm']:.2f}). With no core ever idle, (c)'s "
        f"{busy:.2f} busy core-seconds would take {busy / SPARK_CORES:.2f} s on Spark's {SPARK_CORES} cores: at most "
        f"**{seconds['d'] / (busy / SPARK_CORES):.0%}** of (d) while Spark's JVM costs what it does.",
    ]
    return lines


def recipes(spark, args):
    """(a)-(e) on the 20-feature data: the SPARK section."""
    import pandas as pd
    import pyarrow as pa
    import pyspark
    import shap
    import sklearn
    import xgboost
    from sklearn.ensemble import RandomForestClassifier
    from xgboost.spark import SparkXGBClassifier

    import shapfusion
    import shapfusion.spark as sfs

    frame, y = data(args.rows, FEATURES)
    names = list(frame.columns[1:])
    df = spark.createDataFrame(frame).repartition(args.partitions).cache()
    df.count()
    peer = df.limit(args.peer_rows).repartition(args.partitions).cache()
    peer.count()
    small = df.limit(args.shap_rows).repartition(args.partitions).cache()
    small.count()

    # The models: XGBoost trained by its own Spark estimator (its booster is the model the other
    # paths load), and a scikit-learn forest.
    train = spark.createDataFrame(frame.assign(label=y).iloc[:50_000]).repartition(2)
    assembled = train.withColumn("label", train["label"].cast("double"))
    estimator = SparkXGBClassifier(features_col=names, label_col="label", n_estimators=100, max_depth=6, num_workers=1, pred_contrib_col="contrib")
    xgb_spark_model = estimator.fit(assembled)
    booster = xgb_spark_model.get_booster()
    # Fitted on a DataFrame, so the forest knows its features by name (feature_names_in_), as
    # explain() matches them.
    forest = RandomForestClassifier(n_estimators=100, max_depth=10, n_jobs=2, random_state=0).fit(frame[names].iloc[:50_000], y[:50_000])

    results = []

    def record(method, model, rows, seconds):
        results.append((method, model, rows, rows / seconds))
        print(results[-1], flush=True)

    # (a) the pandas-UDF recipe with shap's TreeExplainer.
    def shap_recipe(model, rows_df):
        schema = "id long, " + ", ".join(f"{n} double" for n in names)

        def run(pdfs):
            explainer = shap.TreeExplainer(model)
            for pdf in pdfs:
                values = np.asarray(explainer.shap_values(pdf[names], check_additivity=False))
                if values.ndim == 3:
                    values = values[..., -1]
                out = pd.DataFrame(values, columns=names)
                out.insert(0, "id", pdf["id"].to_numpy())
                yield out

        return rows_df.mapInPandas(run, schema)

    record("(a) mapInPandas + shap.TreeExplainer", "RandomForestClassifier", args.shap_rows, timed(lambda: noop(shap_recipe(forest, small)), 1))
    record("(a) mapInPandas + shap.TreeExplainer", "XGBoost", args.peer_rows, timed(lambda: noop(shap_recipe(booster, peer)), args.peer_repeats))

    # (b) XGBoost's own: pred_contribs in mapInPandas, and xgboost.spark's pred_contrib_col.
    raw = booster.save_raw("ubj")

    def contribs(pdfs):
        model = xgboost.Booster()
        model.load_model(bytearray(raw))
        model.set_param({"nthread": 1})
        for pdf in pdfs:
            values = model.predict(xgboost.DMatrix(pdf[names]), pred_contribs=True)
            out = pd.DataFrame(values[:, :-1].astype(np.float64), columns=names)
            out.insert(0, "id", pdf["id"].to_numpy())
            yield out

    schema = "id long, " + ", ".join(f"{n} double" for n in names)
    record("(b) mapInPandas + XGBoost pred_contribs", "XGBoost", args.peer_rows, timed(lambda: noop(peer.mapInPandas(contribs, schema)), args.peer_repeats))
    record("(b) xgboost.spark pred_contrib_col", "XGBoost", args.peer_rows, timed(lambda: noop(xgb_spark_model.transform(peer).select("id", "contrib")), args.peer_repeats))

    # (c) shapfusion.spark.explain, and (d) shapfusion.Explainer outside Spark: the XGBoost
    # model on all the rows (and on the peers' too), the forest on the peers' rows.
    record("(c) shapfusion.spark.explain", "XGBoost", args.rows, timed(lambda: noop(sfs.explain(df, booster, keep=["id"])), args.repeats))
    record(C_PEER_ROWS, "XGBoost", args.peer_rows, timed(lambda: noop(sfs.explain(peer, booster, keep=["id"])), args.repeats))
    record("(c) shapfusion.spark.explain", "RandomForestClassifier", args.peer_rows, timed(lambda: noop(sfs.explain(peer, forest, keep=["id"])), args.repeats))
    table = pa.Table.from_pandas(frame, preserve_index=False)
    for label, model, rows in [("XGBoost", booster, args.rows), ("RandomForestClassifier", forest, args.peer_rows)]:
        explainer = shapfusion.Explainer(model, threads=2)
        rows_table = table.slice(0, rows)
        record("(d) shapfusion.Explainer, no Spark", label, rows, timed(lambda: explainer.shap_values(rows_table), args.repeats))

    # (e) Spark's own floor: the same rows through mapInArrow into a struct of as many doubles
    # as (c) writes, with no computation: what moving the rows between the JVM and Python costs.
    record("(e) mapInArrow, rows passed through (Spark's floor)", "none", args.rows, timed(lambda: noop(passthrough_job(df, names)), args.repeats))

    rate = {(m, model): r for m, model, _, r in results}

    floor = rate[("(e) mapInArrow, rows passed through (Spark's floor)", "none")]
    a, c, d = "(a) mapInPandas + shap.TreeExplainer", "(c) shapfusion.spark.explain", "(d) shapfusion.Explainer, no Spark"

    def bound(model):
        """(c)'s best rate as a fraction of (d)'s: the engine's time per row plus Spark's transfer."""
        outside = rate[(d, model)]
        return (1 / (1 / outside + 1 / floor)) / outside

    def ratio(x, y):
        return f"{rate[x] / rate[y]:.1f}×"

    lines = [
        "## Spark: shapfusion.spark.explain against the usual recipes (benchmarks/spark.py)",
        "",
        f"Command: `python benchmarks/spark.py --rows {args.rows} --peer-rows {args.peer_rows} --shap-rows {args.shap_rows} --repeats {args.repeats} --peer-repeats {args.peer_repeats}` "
        f"(release wheel). Machine: {machine.describe()}; local Spark `local[{SPARK_CORES}]`, "
        f"{args.partitions} partitions; Python {platform.python_version()}; pyspark {pyspark.__version__}, shap {shap.__version__}, "
        f"xgboost {xgboost.__version__}, scikit-learn {sklearn.__version__}, shapfusion {shapfusion.__version__}. "
        f"{FEATURES} features; XGBoost: 100 trees, depth 6, trained by `xgboost.spark.SparkXGBClassifier`; forest: 100 trees, depth 10. "
        "Each Spark job writes to the `noop` sink; rows/s over its wall time, after one warm-up run of the same job: the median of "
        f"{args.repeats} runs for (c) and (d), {args.peer_repeats} for the peers (a) and (b), which take minutes a run. "
        f"Rows: the first {args.peer_rows:,} of the same DataFrame for the peers and the forest, {args.shap_rows:,} for shap on the forest, "
        f"all {args.rows:,} for shapfusion and Spark's floor on the XGBoost model: a Spark job's fixed cost (a few tenths of a second) "
        "is nothing to the peers' minutes but weighs on a job of a few seconds; (c) on the peers' rows is listed too.",
        "",
        "| method | model | rows | rows/s |",
        "|---|---|---:|---:|",
    ]
    lines += [f"| {m} | {model} | {rows:,} | {r:,.0f} |" for m, model, rows, r in results]
    lines += [
        "",
        f"* (c) against (a), same model: RandomForestClassifier {ratio((c, 'RandomForestClassifier'), (a, 'RandomForestClassifier'))}, "
        f"XGBoost {ratio((c, 'XGBoost'), (a, 'XGBoost'))} (target: 50×).",
        f"* (c) against (b): {ratio((c, 'XGBoost'), ('(b) mapInPandas + XGBoost pred_contribs', 'XGBoost'))} pred_contribs in mapInPandas, "
        f"{ratio((c, 'XGBoost'), ('(b) xgboost.spark pred_contrib_col', 'XGBoost'))} xgboost.spark.",
        f"* (c) on the peers' {args.peer_rows:,} rows, XGBoost model: {ratio((C_PEER_ROWS, 'XGBoost'), (a, 'XGBoost'))} (a), "
        f"{rate[(C_PEER_ROWS, 'XGBoost')] / rate[(d, 'XGBoost')]:.0%} of (d).",
        f"* (c) against (d), outside Spark: XGBoost {rate[(c, 'XGBoost')] / rate[(d, 'XGBoost')]:.0%}, "
        f"RandomForestClassifier {rate[(c, 'RandomForestClassifier')] / rate[(d, 'RandomForestClassifier')]:.0%} (target: within 10 %).",
        f"* Spark's floor (e): moving the rows alone runs {floor:,.0f} rows/s on the same cores. Were its time per row added to (d)'s, "
        f"(c) could reach {bound('XGBoost'):.0%} of (d) on the XGBoost model and {bound('RandomForestClassifier'):.0%} on the forest; "
        f"(c) ran at {rate[(c, 'XGBoost')] / rate[(d, 'XGBoost')]:.0%} and {rate[(c, 'RandomForestClassifier')] / rate[(d, 'RandomForestClassifier')]:.0%}: "
        "where (c) is above that sum, Spark's transfer did not cost it its time per row one for one.",
        "* Targets: " + "; ".join(
            f"{model} {'met' if rate[(c, model)] >= 50 * rate[(a, model)] and abs(rate[(c, model)] / rate[(d, model)] - 1) <= 0.1 else 'NOT met'} "
            f"({rate[(c, model)] / rate[(a, model)]:.1f}× (a), {rate[(c, model)] / rate[(d, model)]:.0%} of (d))"
            for model in ("XGBoost", "RandomForestClassifier")
        ) + ".",
    ]
    write_results_section("SPARK", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
