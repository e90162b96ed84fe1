"""scikit-learn, CatBoost and Spark ML models through the Python package: against shap (which
computes scikit-learn's values itself), CatBoost's own ShapValues, the committed Spark ML
fixtures, and bit for bit against the files ``save_model`` writes and the CLI reads."""

import json
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import shapfusion
from conftest import REPO, relative_error

sklearn = pytest.importorskip("sklearn")
shap = pytest.importorskip("shap")
from sklearn import ensemble, tree  # noqa: E402


def rows(n: int, f: int, seed: int, missing: float = 0.0) -> np.ndarray:
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, f))
    if missing:
        X[r.random(X.shape) < missing] = np.nan
    return X


def target(X: np.ndarray) -> np.ndarray:
    Z = np.nan_to_num(X)
    return Z[:, 0] * 1.5 + np.sin(2 * Z[:, 1]) + Z[:, 2] * Z[:, 3]


def shap_layout(explainer, X: np.ndarray) -> np.ndarray:
    """shap's path-dependent values in shapfusion's layout: (n, F+1) or (n, G, F+1)."""
    n, f = X.shape
    sv = np.asarray(explainer.shap_values(X, check_additivity=False), dtype=np.float64).reshape(n, f, -1)
    base = np.asarray(explainer.expected_value, dtype=np.float64).reshape(-1)
    out = np.concatenate([sv.transpose(0, 2, 1), np.broadcast_to(base[None, :, None], (n, base.size, 1))], axis=2)
    return out[:, 0, :] if base.size == 1 else out


ESTIMATORS = {
    "decision_tree_regressor": lambda: tree.DecisionTreeRegressor(max_depth=12, random_state=0),
    "random_forest_classifier": lambda: ensemble.RandomForestClassifier(n_estimators=10, max_depth=6, random_state=0),
    "extra_trees_multiclass": lambda: ensemble.ExtraTreesClassifier(n_estimators=8, max_depth=6, random_state=0),
    "random_forest_regressor": lambda: ensemble.RandomForestRegressor(n_estimators=8, max_depth=6, random_state=0),
    "gradient_boosting_regressor": lambda: ensemble.GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0),
    "gradient_boosting_binary": lambda: ensemble.GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0),
    "hist_gradient_boosting": lambda: ensemble.HistGradientBoostingRegressor(max_iter=15, random_state=0),
    "hist_multiclass": lambda: ensemble.HistGradientBoostingClassifier(max_iter=8, random_state=0),
    "isolation_forest": lambda: ensemble.IsolationForest(n_estimators=8, random_state=0),
}


def fitted(name: str):
    X = rows(500, 5, seed=3, missing=0.05 if "hist" in name or "random_forest" in name or "decision" in name else 0.0)
    y = target(X)
    if "multiclass" in name:
        y = np.digitize(y, [-1.0, 1.0])
    elif "classifier" in name or "binary" in name:
        y = y > 0.2
    m = ESTIMATORS[name]()
    m.fit(X) if name == "isolation_forest" else m.fit(X, y)
    return m, X[:40]


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_sklearn_estimators_match_shap(name):
    m, X = fitted(name)
    ours = shapfusion.Explainer(m).shap_values(X)
    theirs = shap_layout(shap.TreeExplainer(m, feature_perturbation="tree_path_dependent"), X)
    assert ours.shape == theirs.shape
    assert relative_error(ours, theirs) < 1e-6, name


def test_sklearn_classifier_probabilities_add_up_to_predict_proba():
    m, X = fitted("random_forest_classifier")
    explainer = shapfusion.Explainer(m)
    assert explainer.num_groups == 2
    np.testing.assert_allclose(explainer.shap_values(X).sum(axis=2), m.predict_proba(X), atol=1e-12)
    np.testing.assert_allclose(explainer.predict_margin(X), m.predict_proba(X), atol=1e-12)


def test_sklearn_interactions_match_shap():
    m, X = fitted("gradient_boosting_regressor")
    ours = shapfusion.Explainer(m).interactions(X)
    iv = shap.TreeExplainer(m).shap_interaction_values(X)
    assert relative_error(ours[:, :5, :5], iv) < 1e-6


def test_save_model_file_gives_the_same_bits_in_python_and_the_cli(cli, tmp_path):
    m, X = fitted("hist_multiclass")
    path = tmp_path / "hist.json"
    shapfusion.save_model(m, path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "shapfusion.trees" and doc["format_version"] == 1
    from_estimator = shapfusion.Explainer(m).shap_values(X)
    from_file = shapfusion.Explainer(path).shap_values(X)
    np.testing.assert_array_equal(from_estimator, from_file)
    data = tmp_path / "rows.parquet"
    pq.write_table(pa.table({f"f{j}": X[:, j] for j in range(X.shape[1])}), data)
    out = tmp_path / "out.parquet"
    subprocess.run([cli, "explain", "--model", path, "--input", data, "--output", out, "--no-progress"], check=True, capture_output=True)
    written = pq.read_table(out)
    assert pa.Table.from_batches([shapfusion.Explainer(path).shap_values(X, as_arrow=True)]).equals(written)


def test_save_model_refuses_what_it_cannot_read(tmp_path):
    from sklearn.linear_model import LinearRegression

    with pytest.raises(TypeError, match="LinearRegression"):
        shapfusion.save_model(LinearRegression().fit([[0.0], [1.0]], [0.0, 1.0]), tmp_path / "x.json")
    with pytest.raises(ValueError, match="not fitted"):
        shapfusion.save_model(ensemble.RandomForestRegressor(), tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_hist_gradient_boosting_categories_from_a_dataframe():
    pd = pytest.importorskip("pandas")
    r = np.random.default_rng(5)
    df = pd.DataFrame({"a": r.normal(size=600), "c": pd.Categorical(r.choice(["x", "y", "z"], size=600))})
    y = df["a"] + (df["c"] == "y") * 2.0
    m = ensemble.HistGradientBoostingRegressor(max_iter=10, categorical_features="from_dtype", random_state=0).fit(df, y)
    test = df.iloc[:30].copy()
    explainer = shapfusion.Explainer(m)
    margin = explainer.predict_margin(test)
    np.testing.assert_allclose(margin, m.predict(test), rtol=0, atol=1e-12)
    np.testing.assert_allclose(explainer.shap_values(test).sum(axis=1), m.predict(test), atol=1e-12)


def test_catboost_matches_its_own_shap_values():
    catboost = pytest.importorskip("catboost")
    X = rows(600, 5, seed=4, missing=0.05)
    y = target(X)
    for model, labels in (
        (catboost.CatBoostRegressor(iterations=15, depth=6, verbose=0, random_seed=0, allow_writing_files=False), y),
        (catboost.CatBoostClassifier(iterations=10, depth=4, verbose=0, random_seed=0, loss_function="MultiClass", allow_writing_files=False), np.digitize(y, [-1.0, 1.0])),
    ):
        model.fit(X, labels)
        test = X[:40]
        ours = shapfusion.Explainer(model).shap_values(test)
        theirs = np.asarray(model.get_feature_importance(catboost.Pool(test), type="ShapValues"), dtype=np.float64)
        assert ours.shape == theirs.shape
        assert relative_error(ours, theirs) < 1e-6
        raw = np.asarray(model.predict(test, prediction_type="RawFormulaVal"), dtype=np.float64)
        np.testing.assert_allclose(shapfusion.Explainer(model).predict_margin(test), raw, atol=1e-9)


def test_catboost_binary_files_match_its_own_shap_values(tmp_path):
    """A `.cbm` (CatBoost's default `save_model`) loads by path, symmetric and non-symmetric, with
    one-hot and CTR categories: CatBoost's own values where they hold, the bits of the in-memory
    model's."""
    catboost = pytest.importorskip("catboost")
    pd = pytest.importorskip("pandas")
    r = np.random.default_rng(9)
    df = pd.DataFrame({"a": r.normal(size=800), "b": r.normal(size=800), "colour": r.choice(["red", "blue", "green"], size=800),
                       "city": [f"c{k}" for k in r.integers(0, 30, size=800)]})
    df.loc[r.random(800) < 0.05, "a"] = np.nan
    y = df["a"].fillna(0) + df["b"] ** 2 + (df["colour"] == "red") * 2.0 + df["city"].str[1:].astype(int) % 5 * 0.4
    cats = ["colour", "city"]
    test = df.iloc[:30].copy()
    test.loc[test.index[0], "city"] = "atlantis"  # unseen: the CTR of no rows, as in CatBoost
    for grow in ("SymmetricTree", "Depthwise"):
        m = catboost.CatBoostRegressor(iterations=12, depth=4, one_hot_max_size=4, max_ctr_complexity=1, grow_policy=grow, verbose=0, random_seed=0,
                                       allow_writing_files=False)
        m.fit(df, y, cat_features=cats)
        path = tmp_path / f"{grow}.cbm"
        m.save_model(str(path))
        ours = shapfusion.Explainer(str(path)).shap_values(test)
        np.testing.assert_array_equal(ours, shapfusion.Explainer(m).shap_values(test))
        raw = np.asarray(m.predict(test, prediction_type="RawFormulaVal"), dtype=np.float64)
        np.testing.assert_allclose(ours.sum(axis=1), raw, atol=1e-9)
        assert np.abs(ours[:, 3]).max() > 0.1  # the CTR splits carry the city's effect
        if grow == "SymmetricTree":  # CatBoost's own values are exact on symmetric trees only
            theirs = np.asarray(m.get_feature_importance(catboost.Pool(test, cat_features=cats), type="ShapValues"))
            assert relative_error(ours, theirs) < 1e-6


def test_catboost_one_hot_categories_by_value_and_ctr_refused_by_name():
    catboost = pytest.importorskip("catboost")
    pd = pytest.importorskip("pandas")
    r = np.random.default_rng(8)
    df = pd.DataFrame({"a": r.normal(size=400), "colour": r.choice(["red", "blue", "green"], size=400), "grade": r.integers(1, 4, size=400)})
    y = df["a"] + (df["colour"] == "red") * 2.0 + (df["grade"] == 2) * 1.0
    kwargs = dict(iterations=8, depth=3, verbose=0, random_seed=0, allow_writing_files=False)
    m = catboost.CatBoostRegressor(one_hot_max_size=10, **kwargs).fit(df, y, cat_features=["colour", "grade"])
    test = df.iloc[:25].copy()
    test.loc[test.index[0], "colour"] = "violet"  # unseen: equal to no split's value, as in CatBoost
    ours = shapfusion.Explainer(m).shap_values(test)
    theirs = np.asarray(m.get_feature_importance(catboost.Pool(test, cat_features=["colour", "grade"]), type="ShapValues"))
    assert relative_error(ours, theirs) < 1e-6
    # Categories CatBoost turns into CTR statistics (more than one_hot_max_size of them) are
    # explained as CatBoost explains them, an unseen one included.
    many = pd.DataFrame({"a": r.normal(size=600), "city": [f"c{k}" for k in r.integers(0, 30, size=600)]})
    y = many["a"] + many["city"].str[1:].astype(int) % 5 * 0.4
    m = catboost.CatBoostRegressor(one_hot_max_size=2, **kwargs).fit(many, y, cat_features=["city"])
    test = many.iloc[:25].copy()
    test.loc[test.index[0], "city"] = "atlantis"
    ours = shapfusion.Explainer(m).shap_values(test)
    theirs = np.asarray(m.get_feature_importance(catboost.Pool(test, cat_features=["city"]), type="ShapValues"))
    assert relative_error(ours, theirs) < 1e-6
    assert np.abs(ours[:, 1]).max() > 0.1  # the CTR splits carry the city's effect
    # CTRs of feature combinations (max_ctr_complexity above 1) are explained as CatBoost
    # explains them: a combination's split credited to its features together, shared equally.
    many["shop"] = [f"s{k}" for k in r.integers(0, 20, size=600)]
    y = y + (many["city"].str[1:].astype(int) + many["shop"].str[1:].astype(int)) % 4 * 0.5
    combined = catboost.CatBoostRegressor(one_hot_max_size=2, max_ctr_complexity=2, **{**kwargs, "iterations": 30, "depth": 4})
    combined.fit(many, y, cat_features=["city", "shop"])
    assert any(len(c["elements"]) > 1 for c in json.loads(_catboost_json(combined))["features_info"]["ctrs"])
    test = many.iloc[:25].copy()
    ours = shapfusion.Explainer(combined).shap_values(test)
    theirs = np.asarray(combined.get_feature_importance(catboost.Pool(test, cat_features=["city", "shop"]), type="ShapValues"))
    assert relative_error(ours, theirs) < 1e-9


def test_catboost_as_trained_by_default_matches_its_own_shap_values(tmp_path):
    """CatBoost trained with its defaults for 200 trees or more sets max_ctr_complexity to 4: CTRs
    of combinations of categorical features, with float and one-hot conditions. Explained from
    the model and its `.cbm` as CatBoost explains them, through `TreeExplainer` too, and over a
    background; what is not built yet for them says so."""
    catboost = pytest.importorskip("catboost")
    pd = pytest.importorskip("pandas")
    r = np.random.default_rng(21)
    n = 3000
    df = pd.DataFrame({"x": r.normal(size=n), "z": r.normal(size=n), "colour": r.choice(["red", "blue"], size=n),
                       "city": [f"c{k}" for k in r.integers(0, 25, size=n)], "shop": [f"s{k}" for k in r.integers(0, 15, size=n)]})
    codes = df["city"].str[1:].astype(int) * 3 + df["shop"].str[1:].astype(int)
    y = ((codes % 7 < 3) * 2.0 + df["x"] + (df["colour"] == "red") * 0.5 + r.normal(size=n) * 0.3 > 1.2).astype(int)
    cats = ["colour", "city", "shop"]
    m = catboost.CatBoostClassifier(iterations=200, verbose=0, random_seed=0, allow_writing_files=False).fit(df, y, cat_features=cats)
    assert m.get_all_params()["max_ctr_complexity"] > 1
    ctrs = json.loads(_catboost_json(m))["features_info"]["ctrs"]
    assert any(sum(e["combination_element"] == "cat_feature_value" for e in c["elements"]) > 1 for c in ctrs)
    test = df.iloc[:50].copy()
    test.loc[test.index[0], "city"] = "atlantis"  # unseen: every combination holding it too
    pool = catboost.Pool(test, cat_features=cats)
    theirs = np.asarray(m.get_feature_importance(pool, type="ShapValues"), dtype=np.float64)
    path = tmp_path / "default.cbm"
    m.save_model(str(path))
    for model in (m, str(path)):
        ours = shapfusion.Explainer(model).shap_values(test)
        assert relative_error(ours, theirs) < 1e-9
    raw = np.asarray(m.predict(test, prediction_type="RawFormulaVal"), dtype=np.float64)
    np.testing.assert_allclose(ours.sum(axis=1), raw, atol=1e-9)
    explained = shapfusion.TreeExplainer(m).shap_values(test)
    assert relative_error(explained, theirs[:, :-1]) < 1e-9
    interactions = shapfusion.Explainer(m).interactions(test)
    np.testing.assert_allclose(interactions.sum(axis=2), ours, atol=1e-9)
    # Over a background: CatBoost's own Independent Tree SHAP (reference_data=, which asks for
    # labels its values of the margin do not use).
    background = df.iloc[1000:1100]
    independent = np.asarray(m.get_feature_importance(
        catboost.Pool(test, label=y.iloc[:50], cat_features=cats), type="ShapValues",
        reference_data=catboost.Pool(background, label=y.iloc[1000:1100], cat_features=cats)), dtype=np.float64)
    interventional = shapfusion.Explainer(m, background=background)
    assert relative_error(interventional.shap_values(test), independent) < 1e-9
    with pytest.raises(NotImplementedError, match="CTRs of feature combinations"):
        interventional.interactions(test)


def _catboost_json(model) -> str:
    """A CatBoost model's JSON, as ``save_model(format="json")`` writes it."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.json"
        model.save_model(str(path), format="json")
        return path.read_text()


@pytest.mark.parametrize(
    "name",
    [
        "spark_random_forest",
        "spark_gbt_classifier",
        "spark_tree_categorical",
        "spark_pipeline_gbt",
        "spark_cv_forest",
        "spark_one_vs_rest_gbt",
        "spark_one_vs_rest_forest",
        "spark_one_vs_rest_tree",
        "spark_xgboost_pipeline",
    ],
)
def test_spark_ml_model_directories_match_the_fixtures(name):
    fixture = REPO / "tests" / "fixtures" / name
    expected = json.loads((fixture / "expected.json").read_text())
    X = pq.read_table(fixture / "input.parquet")
    ours = shapfusion.Explainer(fixture / "model").shap_values(X)
    theirs = np.asarray(expected["contribs"]).reshape(ours.shape)
    assert relative_error(ours, theirs) < 1e-6


FORMAT_FIXTURES = sorted(
    p.name for p in (REPO / "tests" / "fixtures").iterdir() if p.name.startswith(("skl_", "cb_", "spark_")) and (p / "expected.json").exists()
)


@pytest.mark.parametrize("name", FORMAT_FIXTURES)
def test_every_new_format_fixture_equals_the_cli_bit_for_bit(cli, name, tmp_path):
    fixture = REPO / "tests" / "fixtures" / name
    model = fixture / "model" if (fixture / "model").is_dir() else fixture / "model.json"
    rows = pq.read_table(fixture / "input.parquet")
    explainer = shapfusion.Explainer(model)
    for flag, method in (([], "shap_values"), (["--margin"], "predict_margin")):
        out = tmp_path / f"{method}.parquet"
        subprocess.run([cli, "explain", "--model", model, "--input", fixture / "input.parquet", "--output", out, "--no-progress", *flag], check=True, capture_output=True)
        assert pa.Table.from_batches([getattr(explainer, method)(rows, as_arrow=True)]).equals(pq.read_table(out)), (name, method)


def test_sklearn_interventional_matches_shap_over_the_whole_background():
    m, X = fitted("gradient_boosting_regressor")
    background = rows(150, 5, seed=9)
    ours = shapfusion.Explainer(m, background=background).shap_values(X)
    # shap keeps 100 random rows of a larger background unless told to keep them all.
    theirs_explainer = shap.TreeExplainer(m, data=shap.maskers.Independent(background, max_samples=len(background)), feature_perturbation="interventional")
    theirs = shap_layout(theirs_explainer, X)
    assert relative_error(ours, theirs) < 1e-6


NON_SYMMETRIC = sorted(p.name for p in (REPO / "tests" / "fixtures").iterdir() if p.name.startswith(("cb_depthwise_", "cb_lossguide_")))


@pytest.mark.parametrize("name", NON_SYMMETRIC)
def test_catboost_non_symmetric_trees_equal_the_brute_force(name):
    """Depthwise and Lossguide trees through shapfusion.TreeExplainer: the fixture's reference, a
    brute force over the saved trees that adds up to CatBoost's RawFormulaVal."""
    catboost = pytest.importorskip("catboost")
    fixture = REPO / "tests" / "fixtures" / name
    expected = json.loads((fixture / "expected.json").read_text())
    model = catboost.CatBoost()
    model.load_model(str(fixture / "model.json"), format="json")
    X = pq.read_table(fixture / "input.parquet").to_pandas()
    n, f, g = expected["rows"], len(expected["features"]), expected["groups"]
    exact = np.asarray(expected["contribs"]).reshape(n, g, f + 1)
    ours = shapfusion.TreeExplainer(model)
    values = ours.shap_values(X).reshape(n, f, g)
    np.testing.assert_allclose(values.transpose(0, 2, 1), exact[:, :, :f], rtol=0, atol=1e-9 * np.abs(exact).max())
    margin = np.asarray(expected["margin"]).reshape(n, g)
    np.testing.assert_allclose(values.sum(axis=1) + np.reshape(ours.expected_value, g), margin, atol=1e-9)


def test_catboost_values_of_trained_lossguide_models_do_not_add_up_and_shapfusions_do(tmp_path):
    """CatBoost's ShapValues on a Lossguide or MultiRMSE model as trained (or loaded from .cbm),
    which shap's TreeExplainer passes through, miss CatBoost's own RawFormulaVal; the same model
    re-read from its JSON gets exact values from CatBoost, and shapfusion's equal those."""
    catboost = pytest.importorskip("catboost")
    X = rows(1200, 5, seed=21, missing=0.05)
    y = target(X)
    quiet = dict(random_seed=0, verbose=0, allow_writing_files=False)
    models = [
        catboost.CatBoostClassifier(iterations=12, grow_policy="Lossguide", max_leaves=10, **quiet).fit(X, y > 0.3),
        catboost.CatBoostRegressor(iterations=8, depth=3, grow_policy="Depthwise", loss_function="MultiRMSE", **quiet).fit(X, np.c_[y, np.nan_to_num(X[:, 0])]),
    ]
    for model in models:
        pool = catboost.Pool(X[:40])
        margin = np.asarray(model.predict(pool, prediction_type="RawFormulaVal")).reshape(40, -1)
        theirs = np.asarray(shap.TreeExplainer(model).shap_values(X[:40], check_additivity=False)).reshape(40, 5, -1)
        library = np.asarray(model.get_feature_importance(pool, type="ShapValues")).reshape(40, -1, 6)
        np.testing.assert_allclose(theirs, library[:, :, :5].transpose(0, 2, 1), atol=1e-12)  # shap passes them through
        off = np.abs(library.sum(axis=2) - margin).max()
        assert off > 1e-3, f"CatBoost's values add up here ({off:.2e}): the case this test shows is gone"
        ours = shapfusion.TreeExplainer(model)
        values = ours.shap_values(X[:40]).reshape(40, 5, -1)
        np.testing.assert_allclose(values.sum(axis=1) + np.reshape(ours.expected_value, -1), margin, atol=1e-9)
        reloaded = catboost.CatBoost()
        path = tmp_path / "model.json"
        model.save_model(str(path), format="json")
        reloaded.load_model(str(path), format="json")
        exact = np.asarray(reloaded.get_feature_importance(pool, type="ShapValues")).reshape(40, -1, 6)
        np.testing.assert_allclose(values, exact[:, :, :5].transpose(0, 2, 1), atol=1e-9 * np.abs(exact).max())
