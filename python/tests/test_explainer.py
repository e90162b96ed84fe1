"""shapfusion.Explainer against XGBoost's and LightGBM's own pred_contribs / pred_interactions /
pred_contrib, and against the shapfusion CLI bit for bit."""

import _thread
import json
import pickle
import signal
import subprocess
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shapfusion
from conftest import REPO, frame, labels, relative_error

TOLERANCE = 1e-5  # of max |phi|: XGBoost and LightGBM compute in float32


def xgb_reference(booster, X, **kind):
    import xgboost as xgb

    return booster.predict(xgb.DMatrix(X, enable_categorical=True), **kind)


# -- XGBoost ---------------------------------------------------------------------------------


def test_xgboost_booster_from_memory_matches_pred_contribs(xgb_binary, data):
    explainer = shapfusion.Explainer(xgb_binary)
    phi = explainer.shap_values(data)
    assert phi.shape == (len(data), data.shape[1] + 1)
    assert relative_error(phi, xgb_reference(xgb_binary, data, pred_contribs=True)) < TOLERANCE
    inter = explainer.interactions(data)
    assert inter.shape == (len(data), data.shape[1] + 1, data.shape[1] + 1)
    assert relative_error(inter, xgb_reference(xgb_binary, data, pred_interactions=True)) < TOLERANCE
    margin = explainer.predict_margin(data)
    assert margin.shape == (len(data),)
    assert relative_error(margin, xgb_reference(xgb_binary, data, output_margin=True)) < TOLERANCE
    # Additivity, and interactions summing to the SHAP values.
    np.testing.assert_allclose(phi.sum(axis=1), margin, rtol=0, atol=1e-9)
    np.testing.assert_allclose(inter.sum(axis=2), phi, rtol=0, atol=1e-9)


def test_xgboost_from_file_bytes_and_sklearn_give_the_same_bits(xgb_binary, data, tmp_path):
    import xgboost as xgb

    path = tmp_path / "model.json"
    xgb_binary.save_model(path)
    from_memory = shapfusion.Explainer(xgb_binary).shap_values(data)
    np.testing.assert_array_equal(shapfusion.Explainer(path).shap_values(data), from_memory)
    np.testing.assert_array_equal(shapfusion.Explainer(str(path)).shap_values(data), from_memory)
    np.testing.assert_array_equal(shapfusion.Explainer(path.read_bytes()).shap_values(data), from_memory)
    sklearn_model = xgb.XGBClassifier(n_estimators=5, max_depth=3, n_jobs=2).fit(data, labels(data, 2, 2))
    phi = shapfusion.Explainer(sklearn_model).shap_values(data)
    reference = sklearn_model.get_booster().predict(xgb.DMatrix(data), pred_contribs=True)
    assert relative_error(phi, reference) < TOLERANCE


def test_multiclass_layouts(xgb_multiclass, data):
    explainer = shapfusion.Explainer(xgb_multiclass)
    F = data.shape[1]
    phi = explainer.shap_values(data)
    assert phi.shape == (len(data), 3, F + 1)
    assert relative_error(phi, xgb_reference(xgb_multiclass, data, pred_contribs=True)) < TOLERANCE
    inter = explainer.interactions(data[:50])
    assert inter.shape == (50, 3, F + 1, F + 1)
    assert relative_error(inter, xgb_reference(xgb_multiclass, data[:50], pred_interactions=True)) < TOLERANCE
    margin = explainer.predict_margin(data)
    assert margin.shape == (len(data), 3)
    np.testing.assert_allclose(phi.sum(axis=2), margin, rtol=0, atol=1e-9)


def test_columns_are_matched_by_name_in_any_order(xgb_binary, data):
    explainer = shapfusion.Explainer(xgb_binary)
    expected = explainer.shap_values(data)
    shuffled = data[list(reversed(data.columns))].assign(unused=1.0)
    np.testing.assert_array_equal(explainer.shap_values(shuffled), expected)
    np.testing.assert_array_equal(explainer.shap_values(pa.Table.from_pandas(shuffled)), expected)
    # A plain array is by position: the model's order.
    np.testing.assert_array_equal(explainer.shap_values(data.to_numpy()), expected)


def test_nan_none_and_nullable_columns_are_missing_values(xgb_binary, data):
    explainer = shapfusion.Explainer(xgb_binary)
    expected = explainer.shap_values(data)
    as_objects = data.to_numpy().astype(object)
    as_objects[np.isnan(data.to_numpy())] = None
    np.testing.assert_array_equal(explainer.shap_values(as_objects), expected)
    nullable = data.astype("Float64")  # pandas' nullable floats: <NA> instead of NaN
    assert nullable.isna().to_numpy().any()
    np.testing.assert_array_equal(explainer.shap_values(nullable), expected)
    with_nulls = pa.table({c: pa.array(data[c].to_numpy(), from_pandas=True) for c in data.columns})
    assert with_nulls.column(0).null_count > 0
    np.testing.assert_array_equal(explainer.shap_values(with_nulls), expected)


def test_polars_and_arrow_inputs_equal_numpy(xgb_binary, data):
    polars = pytest.importorskip("polars")
    explainer = shapfusion.Explainer(xgb_binary)
    expected = explainer.shap_values(data)
    np.testing.assert_array_equal(explainer.shap_values(polars.from_pandas(data)), expected)
    table = pa.Table.from_pandas(data, preserve_index=False)
    np.testing.assert_array_equal(explainer.shap_values(table), expected)
    np.testing.assert_array_equal(explainer.shap_values(table.to_batches()[0]), expected)
    # A table of several batches.
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=100))
    assert chunked.column(0).num_chunks > 1
    np.testing.assert_array_equal(explainer.shap_values(chunked), expected)


def test_categorical_xgboost_by_name_and_by_code(xgb_categorical, categorical_data):
    explainer = shapfusion.Explainer(xgb_categorical)
    phi = explainer.shap_values(categorical_data)
    reference = xgb_reference(xgb_categorical, categorical_data, pred_contribs=True)
    assert relative_error(phi, reference) < TOLERANCE
    # The same frame with the categories listed in another order: names, not pandas' codes, count.
    reordered = categorical_data.assign(
        colour=categorical_data["colour"].cat.reorder_categories(list(reversed(categorical_data["colour"].cat.categories)))
    )
    np.testing.assert_array_equal(explainer.shap_values(reordered), phi)
    # Codes as numbers (the model's category order), missing as NaN.
    codes = categorical_data.assign(colour=categorical_data["colour"].cat.codes.replace(-1, np.nan).astype(float))
    np.testing.assert_array_equal(explainer.shap_values(codes), phi)
    inter = explainer.interactions(categorical_data[:40])
    reference = xgb_reference(xgb_categorical, categorical_data[:40], pred_interactions=True)
    assert relative_error(inter, reference) < TOLERANCE


# -- LightGBM --------------------------------------------------------------------------------


def test_lightgbm_booster_and_sklearn_match_pred_contrib(lgb_binary, data, tmp_path):
    import lightgbm as lgb

    phi = shapfusion.Explainer(lgb_binary).shap_values(data)
    assert relative_error(phi, lgb_binary.predict(data, pred_contrib=True)) < TOLERANCE
    path = tmp_path / "model.txt"
    lgb_binary.save_model(path)
    np.testing.assert_array_equal(shapfusion.Explainer(path).shap_values(data), phi)
    margin = shapfusion.Explainer(lgb_binary).predict_margin(data)
    assert relative_error(margin, lgb_binary.predict(data, raw_score=True)) < TOLERANCE
    sklearn_model = lgb.LGBMRegressor(n_estimators=5, num_leaves=7, verbose=-1, n_jobs=2).fit(data, labels(data, 2, 3))
    phi = shapfusion.Explainer(sklearn_model).shap_values(data)
    assert relative_error(phi, sklearn_model.predict(data, pred_contrib=True)) < TOLERANCE


def test_lightgbm_multiclass_is_laid_out_like_xgboost(lgb_multiclass, data):
    phi = shapfusion.Explainer(lgb_multiclass).shap_values(data)
    F = data.shape[1]
    assert phi.shape == (len(data), 3, F + 1)
    # LightGBM flattens the groups: (n, G*(F+1)).
    reference = lgb_multiclass.predict(data, pred_contrib=True).reshape(len(data), 3, F + 1)
    assert relative_error(phi, reference) < TOLERANCE


def test_lightgbm_categorical_by_name(lgb_categorical, categorical_data):
    phi = shapfusion.Explainer(lgb_categorical).shap_values(categorical_data)
    assert relative_error(phi, lgb_categorical.predict(categorical_data, pred_contrib=True)) < TOLERANCE


INTEGER_CODED = ["lgb_int_categories_numpy", "lgb_int_categories_pandas", "lgb_mixed_categories", "lgb_ordered_category"]


@pytest.mark.parametrize("name", INTEGER_CODED)
def test_lightgbm_integer_coded_categories_match_pred_contrib(name):
    """Models whose categories were given as integer codes (`pandas_categorical` null, [] or
    unmatchable lists: tests/make_lgb_integer_category_fixtures.py) load from a path and from
    the Booster LightGBM itself loads, and give LightGBM's pred_contrib within 1e-6."""
    import json

    import lightgbm as lgb

    fixture = REPO / "tests" / "fixtures" / name
    expected = json.loads((fixture / "expected.json").read_text())
    rows = pq.read_table(fixture / "input.parquet")
    reference = np.asarray(expected["contribs"]).reshape(expected["rows"], len(expected["features"]) + 1)
    for model in (fixture / "model.txt", lgb.Booster(model_file=str(fixture / "model.txt"))):
        phi = shapfusion.Explainer(model).shap_values(rows)
        assert relative_error(phi, reference) < 1e-6, (name, model)


def test_strings_for_an_integer_coded_category_say_the_model_stores_no_names():
    fixture = REPO / "tests" / "fixtures" / "lgb_int_categories_pandas"
    rows = pq.read_table(fixture / "input.parquet").to_pandas()
    with pytest.raises(ValueError, match=r'"store".*stores no category names.*codes'):
        shapfusion.Explainer(fixture / "model.txt").shap_values(rows.assign(store=["a"] * len(rows)))


# -- the CLI, bit for bit --------------------------------------------------------------------


def test_values_equal_the_cli_exactly(cli, xgb_multiclass, data, tmp_path):
    model = tmp_path / "model.ubj"
    xgb_multiclass.save_model(model)
    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pandas(data, preserve_index=False), rows)
    explainer = shapfusion.Explainer(model)
    for flag, method in (([], "shap_values"), (["--interactions"], "interactions"), (["--margin"], "predict_margin")):
        out = tmp_path / f"out{len(flag)}{method}.parquet"
        subprocess.run(
            [cli, "explain", "--model", model, "--input", rows, "--output", out, "--no-progress", *flag],
            check=True,
            capture_output=True,
        )
        written = pq.read_table(out)
        ours = getattr(explainer, method)(data, as_arrow=True)
        assert pa.Table.from_batches([ours]).equals(written), method
        # The NumPy layout holds the same numbers.
        dense = getattr(explainer, method)(data)
        if method == "shap_values":
            columns = np.stack([np.stack(written.column(c).to_numpy(zero_copy_only=False)) for c in written.column_names], axis=-1)
            np.testing.assert_array_equal(dense, columns)
        elif method == "predict_margin":
            np.testing.assert_array_equal(dense, np.stack(written.column(0).to_numpy(zero_copy_only=False)))
        else:
            flat = np.concatenate(written.column(0).to_numpy(zero_copy_only=False))
            np.testing.assert_array_equal(dense.reshape(-1), np.concatenate([np.ravel(v) for v in flat]) if flat.dtype == object else flat)


def test_interventional_matches_shap_treeexplainer(xgb_binary, data):
    shap = pytest.importorskip("shap")
    background = data[:80]
    explainer = shapfusion.Explainer(xgb_binary, background=background)
    phi = explainer.shap_values(data[:50])
    masker = shap.maskers.Independent(background, max_samples=len(background))
    reference = shap.TreeExplainer(xgb_binary, data=masker, feature_perturbation="interventional")
    values = reference.shap_values(data[:50])
    assert relative_error(phi[:, :-1], values) < TOLERANCE
    assert abs(phi[0, -1] - reference.expected_value) < TOLERANCE * np.abs(values).max()
    np.testing.assert_allclose(phi.sum(axis=1), explainer.predict_margin(data[:50]), rtol=0, atol=1e-9)
    # Background as a plain array: the same numbers.
    from_array = shapfusion.Explainer(xgb_binary, background=background.to_numpy()).shap_values(data[:50])
    np.testing.assert_array_equal(from_array, phi)
    # Interaction values over the background: rows sum to the values, the matrix to the margin.
    matrices = explainer.interactions(data[:50])
    np.testing.assert_allclose(matrices.sum(axis=2), phi, rtol=0, atol=1e-9)
    np.testing.assert_allclose(matrices.sum(axis=(1, 2)), explainer.predict_margin(data[:50]), rtol=0, atol=1e-9)


def test_lightgbm_linear_trees_over_a_background_equal_the_definition():
    """A LightGBM linear-tree Booster (which neither LightGBM nor shap explains) over a
    background: the values of tests/make_linear_tree_fixtures.py's brute force over LightGBM's
    own scores, also through ``TreeExplainer``; without a background, refused naming it."""
    import lightgbm as lgb

    fixture = REPO / "tests" / "fixtures" / "linear" / "lgb_linear_regression"
    expected = json.loads((fixture / "expected.json").read_text())
    booster = lgb.Booster(model_file=str(fixture / "model.txt"))
    rows = pq.read_table(fixture / "input.parquet").to_pandas()
    background = pq.read_table(fixture / "background.parquet").to_pandas()
    phi = shapfusion.Explainer(booster, background=background).shap_values(rows)
    want = np.array(expected["shapley"]).reshape(phi.shape)
    assert relative_error(phi, want) < 1e-9
    np.testing.assert_allclose(phi.sum(axis=1), booster.predict(rows, raw_score=True), rtol=0, atol=1e-9)
    tree_explainer = shapfusion.TreeExplainer(booster, data=background, feature_perturbation="interventional")
    np.testing.assert_array_equal(tree_explainer.shap_values(rows), phi[:, :-1])
    with pytest.raises(NotImplementedError, match="give background rows"):
        shapfusion.Explainer(booster)


def test_lightgbm_linear_tree_probability_and_loss_are_shaps_definition():
    """shap's ``model_output="probability"`` and ``"log_loss"`` over a background, for a
    linear-tree classifier that shap cannot read: the fixture's per-reference definition over
    LightGBM's own scores; each row adds up to its probability or loss."""
    import lightgbm as lgb

    fixture = REPO / "tests" / "fixtures" / "linear" / "lgb_linear_binary"
    expected = json.loads((fixture / "expected.json").read_text())
    booster = lgb.Booster(model_file=str(fixture / "model.txt"))
    rows = pq.read_table(fixture / "input.parquet").to_pandas()
    background = pq.read_table(fixture / "background.parquet").to_pandas()
    labels = np.array(expected["labels"])
    masker = shapfusion.TreeExplainer(booster, data=background, model_output="probability")
    phi = masker.shap_values(rows)
    want = np.array(expected["probability"]).reshape(len(rows), -1)
    assert relative_error(phi, want[:, :-1]) < 1e-9
    np.testing.assert_allclose(masker.expected_value, want[0, -1], rtol=1e-12)
    np.testing.assert_allclose(phi.sum(axis=1) + masker.expected_value, booster.predict(rows), rtol=0, atol=1e-12)
    loss = shapfusion.TreeExplainer(booster, data=background, model_output="log_loss")
    phi = loss.shap_values(rows, labels)
    want = np.array(expected["log_loss"]).reshape(len(rows), -1)
    assert relative_error(phi, want[:, :-1]) < 1e-9
    with pytest.raises(ValueError, match='model_output = "raw"'):  # shap's own refusal
        masker.shap_interaction_values(rows)


# -- errors, threads, interruption -----------------------------------------------------------


def test_errors_are_python_exceptions_with_the_cli_messages(xgb_binary, data, tmp_path, cli):
    with pytest.raises(FileNotFoundError, match="no-such-model.json"):
        shapfusion.Explainer(tmp_path / "no-such-model.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"learner": 1}')
    with pytest.raises(ValueError) as raised:
        shapfusion.Explainer(bad)
    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pandas(data, preserve_index=False), rows)
    cli_run = subprocess.run([cli, "explain", "--model", bad, "--input", rows, "--output", tmp_path / "o.parquet"], capture_output=True, text=True)
    assert cli_run.returncode != 0 and str(raised.value) in cli_run.stderr
    explainer = shapfusion.Explainer(xgb_binary)
    with pytest.raises(ValueError, match=r'no column named "f_3".*f_0, f_1, f_2, f_4, f_5'):
        explainer.shap_values(data.drop(columns="f_3"))
    with pytest.raises(ValueError, match="5 columns, but the model has 6 features"):
        explainer.shap_values(data.to_numpy()[:, :5])
    with pytest.raises(ValueError, match="2-D"):
        explainer.shap_values(data.to_numpy()[0])
    with pytest.raises(ValueError, match="needs a number"):
        explainer.shap_values(data.assign(f_2="text"))
    with pytest.raises(TypeError, match="model must be"):
        shapfusion.Explainer(12)
    with pytest.raises(ValueError, match="threads"):
        shapfusion.Explainer(xgb_binary, threads=0)
    with pytest.raises(ValueError, match="algorithm|engine"):
        shapfusion.Explainer(xgb_binary, algorithm="fastest")


def test_empty_input_and_one_row(xgb_multiclass, data):
    explainer = shapfusion.Explainer(xgb_multiclass)
    assert explainer.shap_values(data[:0]).shape == (0, 3, data.shape[1] + 1)
    assert explainer.shap_values(data[:0], as_arrow=True).num_rows == 0
    one = explainer.shap_values(data[:1])
    np.testing.assert_array_equal(one, explainer.shap_values(data)[:1])


def test_threads_do_not_change_results(xgb_binary, data):
    many = shapfusion.Explainer(xgb_binary).shap_values(data)
    one = shapfusion.Explainer(xgb_binary, threads=1)
    assert one.threads == 1
    np.testing.assert_array_equal(one.shap_values(data), many)


def test_device_cpu_is_the_default_auto_falls_back_and_gpu_names_what_is_missing(xgb_binary, data):
    cpu = shapfusion.Explainer(xgb_binary).shap_values(data)
    np.testing.assert_array_equal(shapfusion.Explainer(xgb_binary, device="cpu").shap_values(data), cpu)
    with pytest.raises(ValueError, match="unknown device"):
        shapfusion.Explainer(xgb_binary, device="tpu")
    # shap's drop-in takes it too (not a shap argument), for the explainers it builds.
    tree = shapfusion.TreeExplainer(xgb_binary, device="cpu")
    np.testing.assert_allclose(tree.shap_values(data), cpu[:, :-1], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="unknown device"):
        shapfusion.TreeExplainer(xgb_binary, device="tpu").shap_values(data)
    # A background's values are computed on the CPU only, whatever the machine.
    with pytest.raises(NotImplementedError, match="CPU only"):
        shapfusion.Explainer(xgb_binary, device="gpu", background=data[:10])
    try:
        gpu = shapfusion.Explainer(xgb_binary, device="gpu")
    except NotImplementedError as e:
        # No usable GPU here (CI): the wheel still imports and runs, and says what is missing.
        assert "device gpu was asked for" in str(e) and ("CUDA" in str(e) or "NVRTC" in str(e) or "device" in str(e)), e
        auto = shapfusion.Explainer(xgb_binary, device="auto")
        np.testing.assert_array_equal(auto.shap_values(data), cpu)
    else:
        np.testing.assert_allclose(gpu.shap_values(data), cpu, rtol=0, atol=1e-9 * np.abs(cpu).max())


@pytest.fixture(scope="module")
def slow_call():
    """A call that takes about ten seconds on 2 cores, unless interrupted: the reference engine
    on 200 trees (no more rows than that, so an interrupt that does not land fails the test in
    seconds, not in the minutes the whole call would take on a loaded machine)."""
    import xgboost as xgb

    X = frame(2000, 20, seed=11, missing=0.0)
    booster = xgb.train({"max_depth": 8, "eta": 0.1, "nthread": 2}, xgb.DMatrix(X, label=labels(X, 2, 12)), 200)
    explainer = shapfusion.Explainer(booster, algorithm="treeshap")
    rows = np.tile(X.to_numpy(), (20, 1))  # 40,000 rows
    return explainer, rows


def test_ctrl_c_interrupts_a_long_call(slow_call):
    explainer, rows = slow_call
    # A Python started in the background by a shell without job control (`cmd &` in a script)
    # inherits SIGINT ignored, and then has no KeyboardInterrupt handler: interrupt_main does
    # nothing there. Install the handler an interactive Python has, for this test only.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, _thread.interrupt_main)
    began = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            explainer.shap_values(rows)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    elapsed = time.monotonic() - began
    # Chunks aim at half a second of work: the interrupt lands within a couple of them.
    assert elapsed < 5.0, elapsed


def test_the_gil_is_released_while_computing(slow_call):
    explainer, rows = slow_call
    ticks = 0
    done = threading.Event()

    def compute():
        explainer.shap_values(rows[:2000])
        done.set()

    worker = threading.Thread(target=compute)
    began = time.monotonic()
    worker.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    worker.join()
    elapsed = time.monotonic() - began
    # Holding the GIL would starve this loop; released, it ticks about once a millisecond.
    assert elapsed > 0.3 and ticks > 0.2 * elapsed * 1000, (ticks, elapsed)


def test_help_reads_well():
    text = shapfusion.Explainer.__doc__ + shapfusion.Explainer.shap_values.__doc__
    for phrase in ("xgboost.Booster", "lightgbm.Booster", "background", "(n, F+1)", "(n, G, F+1)"):
        assert phrase in text
    assert shapfusion.__version__ == "0.1.0"


def test_lightgbm_random_forests_explain_the_mean_of_their_trees_as_predict_does(data):
    """LightGBM's raw score and pred_contrib of a boosting=rf model are the sum of its trees,
    while its predict() (the model's output) averages them (``average_output``): shapfusion
    explains that average, so its values are pred_contrib over the number of trees and add up to
    predict()."""
    import lightgbm as lgb

    X = data.to_numpy()
    y = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 1])
    params = {"objective": "regression", "boosting": "rf", "bagging_fraction": 0.7, "bagging_freq": 1, "num_leaves": 6, "verbose": -1, "num_threads": 2}
    booster = lgb.train(params, lgb.Dataset(X, y), 5)
    values = shapfusion.Explainer(booster).shap_values(X[:30])
    np.testing.assert_allclose(values.sum(axis=1), booster.predict(X[:30]), atol=1e-12)
    np.testing.assert_allclose(values, booster.predict(X[:30], pred_contrib=True) / 5, atol=1e-12)
    assert np.abs(booster.predict(X[:30], raw_score=True) - booster.predict(X[:30])).max() > 1e-3  # LightGBM's own two differ


def test_xgboost_logitraw_keeps_base_score_as_a_margin(data):
    """binary:logitraw's base_score is a margin (XGBoost 2+), not a probability turned into one."""
    import xgboost as xgb

    y = (np.nan_to_num(data.to_numpy()[:, 0]) > 0.4).astype(int)
    booster = xgb.train({"objective": "binary:logitraw", "max_depth": 3, "nthread": 2}, xgb.DMatrix(data, label=y), 4)
    assert abs(float(json.loads(booster.save_raw("json"))["learner"]["learner_model_param"]["base_score"].strip("[]")) - 0.5) > 0.01
    X = data.iloc[:30]
    values = shapfusion.Explainer(booster).shap_values(X)
    np.testing.assert_allclose(values.sum(axis=1), booster.predict(xgb.DMatrix(X), output_margin=True), atol=1e-5)
    np.testing.assert_allclose(values, booster.predict(xgb.DMatrix(X), pred_contribs=True), atol=1e-5)


def test_xgboost_models_of_one_label_load_as_xgboost_loads_them(data):
    """Trained on labels all alike, XGBoost 3 stores base_score 0 or 1 for a logistic objective
    and holds it 1e-6 inside (0, 1) for the margin (a finite one); shapfusion reads it the same."""
    import xgboost as xgb

    X = data.iloc[:50]
    for label in (0.0, 1.0):
        booster = xgb.train({"objective": "binary:logistic", "max_depth": 2, "nthread": 2}, xgb.DMatrix(data, label=np.full(len(data), label)), 2)
        base = float(json.loads(booster.save_raw("json"))["learner"]["learner_model_param"]["base_score"].strip("[]"))
        assert base == label
        values = shapfusion.Explainer(booster).shap_values(X)
        margin = booster.predict(xgb.DMatrix(X), output_margin=True)
        assert np.isfinite(margin).all() and abs(margin[0]) > 13
        np.testing.assert_allclose(values.sum(axis=1), margin, rtol=1e-6)
        np.testing.assert_allclose(values, booster.predict(xgb.DMatrix(X), pred_contribs=True), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["xgb_missing", "lgb_binary_missing"])
def test_banzhaf_index_gives_woodelfs_values_in_the_shap_layouts(name):
    """``index="banzhaf"``: WOODELF's Banzhaf values (path-dependent, and over a background) and
    interaction index (tests/make_banzhaf_fixtures.py), the bias the margin minus their sum; it
    survives pickling; a probability with a background is refused as not built."""
    fixture = REPO / "tests" / "fixtures" / name
    reference = json.loads((fixture / "banzhaf.json").read_text())
    model = next(p for p in (fixture / "model.json", fixture / "model.txt") if p.exists())
    X = pq.read_table(fixture / "input.parquet")
    explainer = shapfusion.Explainer(model, index="banzhaf")
    n, f = reference["rows"], reference["features"]
    values = explainer.shap_values(X)
    want = np.asarray(reference["banzhaf_values"]).reshape(n, f)
    assert relative_error(values[:, :f], want) < 1e-4
    np.testing.assert_allclose(values.sum(axis=1), np.ravel(explainer.predict_margin(X)), rtol=0, atol=1e-9 * np.abs(want).max())
    matrices = explainer.interactions(X)
    pairs = np.asarray(reference["banzhaf_interactions"]).reshape(n, f, f)
    off = ~np.eye(f, dtype=bool)
    assert relative_error(matrices[:, :f, :f][:, off], pairs[:, off]) < 1e-4
    np.testing.assert_allclose(matrices[:, :f, :f].sum(axis=2), values[:, :f], rtol=0, atol=1e-9 * np.abs(want).max())
    assert np.array_equal(pickle.loads(pickle.dumps(explainer)).shap_values(X), values)
    assert not np.allclose(values, shapfusion.Explainer(model).shap_values(X)), "Banzhaf values are not SHAP values"
    background = pq.read_table(fixture / reference["background"]).slice(0, reference["background_rows"])
    over_background = shapfusion.Explainer(model, index="banzhaf", background=background).shap_values(X)
    want = np.asarray(reference["background_banzhaf_values"]).reshape(n, f)
    assert relative_error(over_background[:, :f], want) < 1e-4
    np.testing.assert_allclose(over_background.sum(axis=1), np.ravel(explainer.predict_margin(X)), rtol=0, atol=1e-9 * np.abs(want).max())
    # Interventional interaction values: Banzhaf's off the diagonal, and Shapley's whole, as
    # WOODELF computes them; rows sum to the values.
    for index, key, mask in (("banzhaf", "background_banzhaf_interactions", off), ("shapley", "background_shapley_interactions", None)):
        interventional = shapfusion.Explainer(model, index=index, background=background)
        matrices = interventional.interactions(X)
        want = np.asarray(reference[key]).reshape(n, f, f)
        got = matrices[:, :f, :f]
        assert relative_error(got[:, mask] if mask is not None else got, want[:, mask] if mask is not None else want) < 1e-4, index
        scale = np.abs(want).max()
        np.testing.assert_allclose(got.sum(axis=2), interventional.shap_values(X)[:, :f], rtol=0, atol=1e-9 * scale)
    with pytest.raises(NotImplementedError, match="not built yet"):
        shapfusion.Explainer(model, index="banzhaf", background=background, transform="logistic")
    with pytest.raises(ValueError, match="unknown index"):
        shapfusion.Explainer(model, index="owen")
