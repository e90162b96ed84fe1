"""shapfusion.TreeExplainer against shap.TreeExplainer: the same layouts, dtypes and values
(within 1e-6 of max |phi|) on XGBoost, LightGBM, scikit-learn and CatBoost models, path-dependent
and interventional, and the paths not built yet refused by name."""

import numpy as np
import pytest
import shapfusion
from conftest import relative_error

shap = pytest.importorskip("shap")


def compare(model, X, data=None, interactions=True):
    kwargs = {} if data is None else {"data": shap.maskers.Independent(data, max_samples=len(data))}
    ours = shapfusion.TreeExplainer(model, **kwargs)
    theirs = shap.TreeExplainer(model, **kwargs)
    assert ours.feature_perturbation == theirs.feature_perturbation
    a, b = ours.shap_values(X), np.asarray(theirs.shap_values(X, check_additivity=False))
    assert a.shape == b.shape, (a.shape, b.shape)
    assert relative_error(a, b) < 1e-6
    # One output: a float (shap 0.51 gives LightGBM binary models a 1-element array); several:
    # one per output.
    expected = np.ravel(theirs.expected_value)
    assert np.ndim(ours.expected_value) == (0 if expected.size == 1 else 1)
    assert relative_error(np.ravel(ours.expected_value), expected) < 1e-5
    if interactions and data is None:
        ia, ib = ours.shap_interaction_values(X), np.asarray(theirs.shap_interaction_values(X))
        assert ia.shape == ib.shape, (ia.shape, ib.shape)
        assert relative_error(ia, ib) < 1e-6
    return ours, theirs


def test_xgboost_binary_and_regression_layouts(xgb_binary, data):
    X = data.iloc[:50]
    ours, theirs = compare(xgb_binary, X)
    assert isinstance(ours.expected_value, float)
    assert abs(ours.expected_value - float(theirs.expected_value)) < 1e-5


def test_xgboost_multiclass_expected_value_includes_the_base_score(xgb_multiclass, data):
    import xgboost

    X = data.iloc[:40]
    ours = shapfusion.TreeExplainer(xgb_multiclass)
    values = ours.shap_values(X)
    assert values.shape == (40, X.shape[1], 3)
    # shap's expected value misses the per-class base score; the library's margins are the check.
    margin = xgb_multiclass.predict(xgboost.DMatrix(X), output_margin=True, strict_shape=True).reshape(40, 3)
    np.testing.assert_allclose(values.sum(axis=1) + ours.expected_value, margin, atol=1e-4)
    theirs = shap.TreeExplainer(xgb_multiclass).shap_values(X, check_additivity=False)
    assert relative_error(values, theirs) < 1e-5  # XGBoost computes in float32


def test_lightgbm_and_sklearn_and_catboost(lgb_binary, data):
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier

    X = data.iloc[:40]
    compare(lgb_binary, X, interactions=False)
    Xn = np.nan_to_num(data.to_numpy())
    y = Xn[:, 0] + Xn[:, 1] ** 2
    forest = RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0).fit(Xn, y > 0.5)
    ours, _ = compare(forest, Xn[:40])
    assert ours.shap_values(Xn[:40]).shape == (40, Xn.shape[1], 2) and ours.expected_value.shape == (2,)
    gb = GradientBoostingRegressor(n_estimators=20, random_state=0).fit(Xn, y)
    compare(gb, Xn[:40])
    catboost = pytest.importorskip("catboost")
    cb = catboost.CatBoostRegressor(iterations=10, depth=4, verbose=0, allow_writing_files=False).fit(Xn, y)
    compare(cb, Xn[:40], interactions=False)


def test_interventional_uses_every_background_row(xgb_binary, data):
    X = data.iloc[:30]
    background = data.iloc[100:350].to_numpy()
    ours, theirs = compare(xgb_binary, X, data=background)
    assert ours.feature_perturbation == "interventional"
    assert abs(ours.expected_value - float(theirs.expected_value)) < 1e-5


def test_explanations_feed_shaps_plots(xgb_binary, data):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    X = data.iloc[:60]
    explanation = shapfusion.TreeExplainer(xgb_binary)(X)
    assert isinstance(explanation, shap.Explanation)
    assert explanation.values.shape == X.shape and explanation.base_values.shape == (60,)
    np.testing.assert_array_equal(explanation.data, X.to_numpy())
    assert list(explanation.feature_names) == list(X.columns)
    shap.plots.beeswarm(explanation, show=False)
    shap.plots.waterfall(explanation[0], show=False)
    shap.plots.bar(explanation, show=False)


def test_what_is_not_built_yet_says_so(xgb_binary, data):
    with pytest.raises(NotImplementedError, match="probability"):
        shapfusion.TreeExplainer(xgb_binary, data=data.to_numpy()[:50], model_output="probability")
    with pytest.raises(NotImplementedError, match="Saabas"):
        shapfusion.TreeExplainer(xgb_binary, approximate=True)
    with pytest.warns(UserWarning, match="tree_path_dependent"):
        explainer = shapfusion.TreeExplainer(xgb_binary, feature_perturbation="interventional")
    assert explainer.feature_perturbation == "tree_path_dependent"


def test_patch_shap_makes_shaps_own_entry_points_use_shapfusion(xgb_binary, data):
    X = data.iloc[:30]
    original = shap.TreeExplainer
    reference = shapfusion.TreeExplainer(xgb_binary).shap_values(X)
    shapfusion.patch_shap()
    try:
        shapfusion.patch_shap()  # twice is harmless
        for explainer in (shap.Explainer(xgb_binary), shap.TreeExplainer(xgb_binary), shap.explainers.Tree(xgb_binary)):
            assert isinstance(explainer, shapfusion.TreeExplainer), type(explainer)
            np.testing.assert_array_equal(explainer.shap_values(X), reference)
        explanation = shap.Explainer(xgb_binary)(X)
        np.testing.assert_array_equal(explanation.values, reference)
    finally:
        shapfusion.unpatch_shap()
    assert shap.TreeExplainer is original
    assert not isinstance(shap.Explainer(xgb_binary), shapfusion.TreeExplainer)


def test_a_series_and_a_dmatrix_are_rows(xgb_binary, data):
    import xgboost

    X = data.iloc[:20]
    explainer = shapfusion.TreeExplainer(xgb_binary)
    rows = explainer.shap_values(X)
    np.testing.assert_array_equal(explainer.shap_values(X.iloc[3]), rows[3:4])
    # A DMatrix stores no entry for a missing value; its rows are the frame's, NaN included.
    np.testing.assert_array_equal(explainer.shap_values(xgboost.DMatrix(X)), rows)
    explanation = explainer(xgboost.DMatrix(X))
    np.testing.assert_array_equal(explanation.data, X.to_numpy().astype(np.float32))  # what a DMatrix holds
