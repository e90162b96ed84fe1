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
    elif interactions:
        # shap has no interventional interaction values; ours sum, row by row, to the values
        # just checked against shap's, in the same layout with one more feature axis.
        ia = ours.shap_interaction_values(X)
        assert ia.shape[:2] + ia.shape[3:] == a.shape and ia.shape[2] == a.shape[1], (ia.shape, a.shape)
        assert relative_error(ia.sum(axis=2), a) < 1e-9
    return ours, theirs


def test_every_kind_of_model_against_shap_layouts_dtypes_and_values(xgb_binary, lgb_multiclass, data):
    """Binary, multiclass, regression and multi-output models of each library, path-dependent
    and interventional. shapfusion's values are float64 always; shap's for XGBoost are XGBoost's
    float32 (so those compare within float32 rounding)."""
    import catboost
    from sklearn.ensemble import ExtraTreesClassifier, GradientBoostingClassifier, RandomForestRegressor

    Xn = np.nan_to_num(data.to_numpy())
    y = labels_of(Xn)
    background = Xn[400:480]
    models = [
        ("lightgbm multiclass", lgb_multiclass, data.iloc[:30], None),
        ("lightgbm multiclass, interventional", lgb_multiclass, data.iloc[:30], data.iloc[400:480]),
        ("xgboost binary, interventional", xgb_binary, data.iloc[:30], data.iloc[400:480]),
        ("sklearn multi-output forest", RandomForestRegressor(n_estimators=6, max_depth=4, random_state=0).fit(Xn, np.c_[Xn[:, 0], Xn[:, 1] * Xn[:, 2]]), Xn[:30], None),
        ("sklearn multi-output forest, interventional", RandomForestRegressor(n_estimators=6, max_depth=4, random_state=0).fit(Xn, np.c_[Xn[:, 0], Xn[:, 1]]), Xn[:30], background),
        ("sklearn extra trees, 3 classes", ExtraTreesClassifier(n_estimators=6, max_depth=4, random_state=0).fit(Xn, y + (Xn[:, 3] > 1)), Xn[:30], None),
        ("sklearn binary gradient boosting, interventional", GradientBoostingClassifier(n_estimators=10, random_state=0).fit(Xn, y), Xn[:30], background),
        ("catboost multiclass", catboost.CatBoostClassifier(iterations=8, depth=4, loss_function="MultiClass", verbose=0, allow_writing_files=False).fit(Xn, y + (Xn[:, 3] > 1)), Xn[:30], None),
        ("catboost binary", catboost.CatBoostClassifier(iterations=8, depth=4, verbose=0, allow_writing_files=False).fit(Xn, y), Xn[:30], None),
    ]
    for name, model, X, bg in models:
        kwargs = {} if bg is None else {"data": shap.maskers.Independent(bg, max_samples=len(bg))}
        ours, theirs = shapfusion.TreeExplainer(model, **kwargs), shap.TreeExplainer(model, **kwargs)
        a, b = ours.shap_values(X), np.asarray(theirs.shap_values(X, check_additivity=False))
        if name == "lightgbm multiclass, interventional":
            # shap's own loader reads a LightGBM multiclass model as one output, the sum of all
            # classes' trees (shap 0.51: values (n, F), a scalar expected value). Its values are
            # our classes' sum; each class is checked against LightGBM's raw scores instead.
            assert b.shape == a.shape[:2] and relative_error(a.sum(axis=-1), b) < 1e-6
            raw = model.predict(X, raw_score=True)
            np.testing.assert_allclose(a.sum(axis=1) + ours.expected_value, raw, atol=1e-9)
            continue
        assert a.shape == b.shape, (name, a.shape, b.shape)
        assert a.dtype == np.float64 and b.dtype in (np.float32, np.float64), name
        assert relative_error(a, b) < 1e-6, name
        expected = np.ravel(theirs.expected_value)
        assert np.ndim(ours.expected_value) == (0 if expected.size == 1 else 1), name
        assert relative_error(np.ravel(ours.expected_value), expected) < 1e-6, name
        explanation = ours(X)
        assert explanation.values.shape == a.shape and explanation.base_values.shape == (len(X),) + np.shape(ours.expected_value), name
        if bg is not None:
            # Interventional interaction values (shap has none): shap's interaction layout, rows
            # summing to the values.
            ia = ours.shap_interaction_values(X)
            assert ia.shape[:2] + ia.shape[3:] == a.shape and relative_error(ia.sum(axis=2), a) < 1e-9, name
            assert ours(X, interactions=True).values.shape == ia.shape, name


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
    shap.plots.scatter(explanation[:, "f_0"], color=explanation, show=False)
    force = shap.plots.force(explanation[0])
    assert "f_0" in force.html() if hasattr(force, "html") else force is not None
    matplotlib.pyplot.close("all")


def test_what_is_not_built_yet_says_so(xgb_binary, xgb_multiclass, data):
    background = data.to_numpy()[:50]
    with pytest.raises(NotImplementedError, match='"log_loss" is not yet supported when model.objective = "multi:softprob"'):
        shapfusion.TreeExplainer(xgb_multiclass, data=background, model_output="log_loss")
    with pytest.raises(NotImplementedError, match="multiclass"):
        shapfusion.TreeExplainer(xgb_multiclass, data=background, model_output="probability")
    with pytest.warns(FutureWarning, match="without providing a background dataset"):
        explainer = shapfusion.TreeExplainer(xgb_binary, feature_perturbation="interventional")
    assert explainer.feature_perturbation == "tree_path_dependent"


def test_approximate_gives_saabas_values_as_xgboost_and_shap_compute_them(xgb_binary, data):
    import xgboost
    from sklearn.ensemble import RandomForestRegressor

    X = data.iloc[:40]
    ours = shapfusion.TreeExplainer(xgb_binary).shap_values(X, approximate=True)
    xgb = xgb_binary.predict(xgboost.DMatrix(X), pred_contribs=True, approx_contribs=True)[:, :-1]
    assert relative_error(ours, xgb) < 1e-5
    theirs = shap.TreeExplainer(xgb_binary).shap_values(X, approximate=True)
    assert relative_error(ours, theirs) < 1e-5
    # Not the exact values, but adding up to the same margin.
    exact = shapfusion.TreeExplainer(xgb_binary).shap_values(X)
    assert relative_error(ours, exact) > 1e-3
    np.testing.assert_allclose(ours.sum(axis=1), exact.sum(axis=1), atol=1e-9)
    Xn = np.nan_to_num(data.to_numpy())
    forest = RandomForestRegressor(n_estimators=6, max_depth=5, random_state=0).fit(Xn, Xn[:, 0] * Xn[:, 1])
    explanation = shapfusion.TreeExplainer(forest)(Xn[:30], approximate=True)
    theirs = shap.TreeExplainer(forest).shap_values(Xn[:30], approximate=True)
    assert relative_error(explanation.values, theirs) < 1e-6
    with pytest.warns(DeprecationWarning, match="approximate"):
        shapfusion.TreeExplainer(forest, approximate=True)


def test_arguments_shap_refuses_are_refused_with_shaps_types(xgb_binary, data):
    from sklearn.ensemble import GradientBoostingRegressor

    with pytest.raises(ValueError, match="tree_path_dependent"):
        shapfusion.TreeExplainer(xgb_binary, model_output="probability")  # no background
    from shap.utils._exceptions import InvalidFeaturePerturbationError, InvalidModelError

    with pytest.raises(InvalidFeaturePerturbationError, match="feature_perturbation"):
        shapfusion.TreeExplainer(xgb_binary, feature_perturbation="conditional")
    with pytest.raises(InvalidModelError, match="not yet supported"):
        shapfusion.TreeExplainer(object())
    with pytest.raises(ValueError, match="model_output"):
        shapfusion.TreeExplainer(xgb_binary, data=data.to_numpy()[:20], model_output="margin")
    Xn = np.nan_to_num(data.to_numpy())
    regressor = GradientBoostingRegressor(n_estimators=5, random_state=0).fit(Xn, Xn[:, 0])
    with pytest.raises(NotImplementedError, match="raw_value"):
        shapfusion.TreeExplainer(regressor, data=Xn[:20], model_output="probability")
    with pytest.raises(ValueError, match="interactions|Only model_output"):
        shapfusion.TreeExplainer(xgb_binary, data=Xn[:20], model_output="probability").shap_interaction_values(Xn[:3])


def probability_pair(model, X, background, model_output="probability"):
    masker = shap.maskers.Independent(background, max_samples=len(background))
    ours = shapfusion.TreeExplainer(model, data=masker, model_output=model_output)
    theirs = shap.TreeExplainer(model, data=masker, model_output=model_output)
    return ours, theirs, ours.shap_values(X), np.asarray(theirs.shap_values(X, check_additivity=False))


def test_probability_output_is_shaps_and_adds_up_to_predict_proba(xgb_binary, lgb_binary, data):
    import xgboost
    from sklearn.ensemble import GradientBoostingClassifier

    X, background = data.iloc[:40], data.iloc[200:320]
    p = xgb_binary.predict(xgboost.DMatrix(X))
    for model, predict_proba in [(xgb_binary, p), (lgb_binary, lgb_binary.predict(X))]:
        ours, theirs, a, b = probability_pair(model, X, background)
        assert a.shape == b.shape == X.shape
        assert relative_error(a, b) < 1e-6
        assert abs(ours.expected_value - float(np.ravel(theirs.expected_value)[0])) < 1e-6
        # The values add up to the library's probability (in float32).
        np.testing.assert_allclose(a.sum(axis=1) + ours.expected_value, predict_proba, atol=1e-5)
    Xn = np.nan_to_num(data.to_numpy())
    gb = GradientBoostingClassifier(n_estimators=15, max_depth=3, random_state=0).fit(Xn, labels_of(Xn))
    ours, theirs, a, b = probability_pair(gb, Xn[:30], Xn[300:380])
    assert relative_error(a, b) < 1e-6
    np.testing.assert_allclose(a.sum(axis=1) + ours.expected_value, gb.predict_proba(Xn[:30])[:, 1], atol=1e-9)


def test_log_loss_is_shaps_and_adds_up_to_each_rows_loss(xgb_binary, lgb_binary, data):
    """model_output="log_loss": shap's values (each background row's margin values rescaled to
    the change in loss against the row's label) for binary log-odds models and squared-error
    regressors; each row adds up to its own loss with the background's mean loss against its
    label, which is expected_value(y) and the Explanation's base value."""
    import lightgbm
    import xgboost
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor
    from shap.utils._exceptions import DimensionError, ExplainerError

    X, background = data.iloc[:40], data.iloc[200:300]
    Xn = np.nan_to_num(data.to_numpy())
    y = labels_of(data.to_numpy())
    target = Xn[:, 0] * 2 + Xn[:, 1] * Xn[:, 2]
    xgb_regressor = xgboost.XGBRegressor(n_estimators=15, max_depth=4, nthread=2).fit(data, target)
    lgb_regressor = lightgbm.LGBMRegressor(n_estimators=15, num_leaves=12, verbose=-1).fit(data, target)
    for name, model, labels, loss in [
        ("xgboost binary", xgb_binary, y[:40], lambda m, t: np.logaddexp(0, m) - t * m),
        ("lightgbm binary", lgb_binary, y[:40], lambda m, t: np.logaddexp(0, m) - t * m),
        ("xgboost regressor", xgb_regressor, target[:40], lambda m, t: (m - t) ** 2),
        ("lightgbm regressor", lgb_regressor, target[:40], lambda m, t: (m - t) ** 2),
    ]:
        masker = shap.maskers.Independent(background, max_samples=len(background))
        ours = shapfusion.TreeExplainer(model, data=masker, model_output="log_loss")
        theirs = shap.TreeExplainer(model, data=masker, model_output="log_loss")
        a, b = ours.shap_values(X, labels), np.asarray(theirs.shap_values(X, labels, check_additivity=False))
        assert a.shape == b.shape == X.shape, name
        assert relative_error(a, b) < 1e-6, name
        for label in (0.0, 1.0, float(labels[3])):
            assert abs(ours.expected_value(label) - float(np.ravel(theirs.expected_value(label))[0])) < 1e-5 * max(1.0, abs(ours.expected_value(label))), name
        margin = shapfusion.Explainer(model).predict_margin(X)
        bias = np.array([ours.expected_value(t) for t in labels])
        np.testing.assert_allclose(a.sum(axis=1) + bias, loss(margin, labels), rtol=1e-9, atol=1e-9, err_msg=name)
        explanation = ours(X, labels)
        np.testing.assert_allclose(explanation.base_values, bias, rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(ours.model.predict(X, labels), loss(margin, labels), rtol=1e-9, err_msg=name)
    # shap's errors for missing or miscounted labels.
    with pytest.raises(ExplainerError, match="labels must be provided"):
        ours.shap_values(X)
    with pytest.raises(DimensionError, match="number of labels"):
        ours.shap_values(X, labels[:5])
    # Where shap names the wrong loss, shapfusion explains the model's own: a binary gradient
    # boosting classifier's log loss (shap: the squared error of its margin, from the trees'
    # friedman_mse criterion), by the definition over each background row.
    gb = GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0).fit(Xn, y)
    ours = shapfusion.TreeExplainer(gb, data=Xn[300:330], model_output="log_loss")
    values = ours.shap_values(Xn[:10], y[:10])
    margins, bg_margins = gb.decision_function(Xn[:10]), gb.decision_function(Xn[300:330])
    for r in range(10):
        want = np.zeros(Xn.shape[1])
        for z in range(30):
            pair = shapfusion.Explainer(gb, background=Xn[300 + z : 301 + z]).shap_values(Xn[r : r + 1])[0, :-1]
            mx, mz = margins[r], bg_margins[z]
            lx, lz = np.logaddexp(0, mx) - y[r] * mx, np.logaddexp(0, mz) - y[r] * mz
            want += pair * (1.0 if mx == mz else (lx - lz) / (mx - mz)) / 30
        np.testing.assert_allclose(values[r], want, rtol=1e-9, atol=1e-12)
    # A forest of squared-error regression trees (its criterion named squared_error) and a
    # CatBoost regressor (RMSE), which shap 0.51 refuses; a forest of probability trees has no
    # log loss of a margin.
    import catboost

    forest = RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0).fit(Xn, target)
    boosted = catboost.CatBoostRegressor(iterations=10, depth=4, verbose=0, allow_writing_files=False).fit(Xn, target)
    for regressor in (forest, boosted):
        ours = shapfusion.TreeExplainer(regressor, data=Xn[300:340], model_output="log_loss")
        values = ours.shap_values(Xn[:20], target[:20])
        bias = np.array([ours.expected_value(t) for t in target[:20]])
        np.testing.assert_allclose(values.sum(axis=1) + bias, (regressor.predict(Xn[:20]) - target[:20]) ** 2, rtol=1e-9)
    from sklearn.ensemble import RandomForestClassifier

    classifier = RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0).fit(Xn, y)
    with pytest.raises(NotImplementedError, match='"log_loss" is not yet supported'):
        shapfusion.TreeExplainer(classifier, data=Xn[300:340], model_output="log_loss")


def test_an_objective_changed_after_training_is_the_one_explained(data):
    """An XGBoost model trained as binary:logitraw, then set to binary:logistic: its
    probability is the logistic of the margin, what the saved model now says."""
    import xgboost

    X = data.iloc[:30]
    booster = xgboost.train({"objective": "binary:logitraw", "max_depth": 3, "nthread": 2}, xgboost.DMatrix(data, label=labels_of(data.to_numpy())), 8)
    with pytest.raises(NotImplementedError, match="raw_value"):
        shapfusion.TreeExplainer(booster, data=data.iloc[100:150], model_output="probability")
    booster.set_param({"objective": "binary:logistic"})
    explainer = shapfusion.TreeExplainer(booster, data=data.iloc[100:150], model_output="probability")
    total = explainer.shap_values(X).sum(axis=1) + explainer.expected_value
    np.testing.assert_allclose(total, booster.predict(xgboost.DMatrix(X)), atol=1e-5)


def test_predict_proba_doubles_a_binary_model_as_shap_does(data):
    import xgboost
    from sklearn.ensemble import RandomForestClassifier

    X, background = data.iloc[:30], data.iloc[200:300]
    clf = xgboost.XGBClassifier(n_estimators=12, max_depth=3, nthread=2).fit(data, labels_of(data.to_numpy()))
    ours, theirs, a, b = probability_pair(clf, X, background, "predict_proba")
    assert a.shape == b.shape == (30, X.shape[1], 2)
    assert relative_error(a, b) < 1e-6
    np.testing.assert_allclose(ours.expected_value, np.ravel(theirs.expected_value), atol=1e-6)
    np.testing.assert_allclose(a.sum(axis=1) + ours.expected_value, clf.predict_proba(X), atol=1e-5)
    # A forest's trees are probabilities already: shap refuses predict_proba here, and its raw
    # values are the answer, which add up to predict_proba.
    Xn = np.nan_to_num(data.to_numpy())
    forest = RandomForestClassifier(n_estimators=8, max_depth=4, random_state=0).fit(Xn, labels_of(Xn))
    ours = shapfusion.TreeExplainer(forest, data=Xn[300:360], model_output="predict_proba")
    raw = shap.TreeExplainer(forest, data=shap.maskers.Independent(Xn[300:360], max_samples=60)).shap_values(Xn[:20])
    values = ours.shap_values(Xn[:20])
    assert relative_error(values, raw) < 1e-6
    np.testing.assert_allclose(values.sum(axis=1) + ours.expected_value, forest.predict_proba(Xn[:20]), atol=1e-9)


def test_tree_limit_counts_trees_as_shap_does(xgb_binary, lgb_binary, data):
    from sklearn.ensemble import RandomForestRegressor

    X = data.iloc[:25]
    for model, limit in [(xgb_binary, 7), (lgb_binary, 4)]:
        ours = shapfusion.TreeExplainer(model).shap_values(X, tree_limit=limit)
        theirs = np.asarray(shap.TreeExplainer(model).shap_values(X, tree_limit=limit, check_additivity=False))
        assert relative_error(ours, theirs) < 1e-6, type(model)
    Xn = np.nan_to_num(data.to_numpy())
    forest = RandomForestRegressor(n_estimators=10, max_depth=4, random_state=0).fit(Xn, Xn[:, 0])
    ours = shapfusion.TreeExplainer(forest).shap_values(Xn[:20], tree_limit=3)
    # shap's own forest output over the first three trees (its scaling stays 1/10).
    theirs = shap.TreeExplainer(forest).shap_values(Xn[:20], tree_limit=3, check_additivity=False)
    assert relative_error(ours, theirs) < 1e-6
    with pytest.raises(ValueError, match="keeps no tree"):
        shapfusion.TreeExplainer(xgb_binary).shap_values(X, tree_limit=0)


def test_early_stopping_limits_xgboost_models_as_shap_does(data):
    import xgboost

    y = labels_of(data.to_numpy())
    clf = xgboost.XGBClassifier(n_estimators=200, max_depth=3, learning_rate=0.5, early_stopping_rounds=3, nthread=2)
    clf.fit(data.iloc[:400], y[:400], eval_set=[(data.iloc[400:], y[400:])], verbose=False)
    assert clf.best_iteration + 1 < clf.get_booster().num_boosted_rounds()
    X = data.iloc[:30]
    ours, theirs = shapfusion.TreeExplainer(clf), shap.TreeExplainer(clf)
    assert ours.model.tree_limit == theirs.model.tree_limit
    assert relative_error(ours.shap_values(X), np.asarray(theirs.shap_values(X))) < 1e-6
    np.testing.assert_allclose(ours.shap_values(X).sum(axis=1) + ours.expected_value, clf.predict(X, output_margin=True), atol=1e-5)


def test_the_model_view_has_shaps_node_arrays(data):
    from sklearn.ensemble import RandomForestRegressor

    Xn = np.nan_to_num(data.to_numpy())
    forest = RandomForestRegressor(n_estimators=4, max_depth=4, random_state=0).fit(Xn, Xn[:, 0] + Xn[:, 1])
    ours, theirs = shapfusion.TreeExplainer(forest).model, shap.TreeExplainer(forest).model
    assert len(ours.trees) == len(theirs.trees) and ours.num_outputs == theirs.num_outputs == 1
    for a, b in zip(ours.trees, theirs.trees):
        np.testing.assert_array_equal(a.children_left, b.children_left)
        np.testing.assert_array_equal(a.children_right, b.children_right)
        np.testing.assert_array_equal(a.features[a.children_left >= 0], b.features[b.children_left >= 0])
        np.testing.assert_allclose(a.node_sample_weight, b.node_sample_weight)
        np.testing.assert_allclose(a.values, b.values, rtol=1e-9, atol=1e-12)
        assert a.max_depth == b.max_depth
    assert ours.values.shape == theirs.values.shape and ours.children_left.shape == theirs.children_left.shape
    np.testing.assert_allclose(ours.predict(Xn[:20]), theirs.predict(Xn[:20]), atol=1e-9)
    np.testing.assert_allclose(ours.predict(Xn[:20]), forest.predict(Xn[:20]), atol=1e-9)


def test_sparse_rows_are_what_each_library_reads(xgb_binary, data):
    import scipy.sparse
    import xgboost
    from sklearn.ensemble import RandomForestRegressor

    X = np.where(np.isnan(data.to_numpy()[:30]), 0.0, data.to_numpy()[:30])
    csr = scipy.sparse.csr_matrix(X)
    # XGBoost: an entry a sparse matrix does not store is missing.
    ours = shapfusion.TreeExplainer(xgb_binary).shap_values(csr)
    theirs = xgb_binary.predict(xgboost.DMatrix(csr, feature_names=xgb_binary.feature_names), pred_contribs=True)[:, :-1]
    assert relative_error(ours, theirs) < 1e-5
    # scikit-learn: it is 0.
    forest = RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0).fit(X, X[:, 0])
    explainer = shapfusion.TreeExplainer(forest)
    np.testing.assert_array_equal(explainer.shap_values(csr), explainer.shap_values(X))
    np.testing.assert_array_equal(explainer(csr).data, X)


def test_rows_in_every_form_users_pass(xgb_binary, data):
    import polars as pl
    import pyarrow as pa

    frame = data.iloc[:20]
    explainer = shapfusion.TreeExplainer(xgb_binary)
    want = explainer.shap_values(frame)
    array = frame.to_numpy()
    np.testing.assert_array_equal(explainer.shap_values(array), want)
    np.testing.assert_array_equal(explainer.shap_values(array.astype(np.float32)), want)  # XGBoost rounds to float32
    as_object = array.astype(object)
    as_object[np.isnan(array)] = None
    np.testing.assert_array_equal(explainer.shap_values(as_object), want)
    np.testing.assert_array_equal(explainer.shap_values(pl.from_pandas(frame)), want)
    np.testing.assert_array_equal(explainer.shap_values(pa.Table.from_pandas(frame, preserve_index=False)), want)
    integers = np.nan_to_num(array).round().astype(np.int64)
    np.testing.assert_array_equal(explainer.shap_values(integers), explainer.shap_values(integers.astype(np.float64)))
    explanation = explainer(pl.from_pandas(frame))
    np.testing.assert_array_equal(explanation.data, array)


def test_wide_frames_are_matched_by_name():
    """20,000 columns, 12 of them the model's features, in a frame and a plain array."""
    import xgboost

    rng = np.random.default_rng(5)
    wide = rng.normal(size=(200, 20_000))
    booster = xgboost.train({"max_depth": 3, "nthread": 2}, xgboost.DMatrix(wide[:, :12], label=wide[:, 0]), 5)
    explainer = shapfusion.TreeExplainer(booster)
    import pandas as pd

    frame = pd.DataFrame(wide, columns=[f"c{j}" for j in range(20_000)])
    frame = frame.rename(columns={f"c{j}": f"f{j}" for j in range(12)})
    got = explainer.shap_values(frame)
    assert got.shape == (200, 12)
    np.testing.assert_array_equal(got, explainer.shap_values(wide[:, :12]))


def labels_of(X: np.ndarray) -> np.ndarray:
    """A binary label the first columns decide, NaN as 0."""
    X = np.nan_to_num(np.asarray(X, dtype=np.float64))
    return (X[:, 0] + 0.5 * X[:, 1] - 0.3 * X[:, 2] > 0).astype(int)


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
        # With a background: shap.Explainer's masker is the data the explainer takes.
        background = data.iloc[200:260]
        interventional = shap.Explainer(xgb_binary, background)
        assert interventional.feature_perturbation == "interventional" and interventional.data.shape == background.shape
        np.testing.assert_array_equal(interventional(X).values, shapfusion.TreeExplainer(xgb_binary, background).shap_values(X))
    finally:
        shapfusion.unpatch_shap()
    assert shap.TreeExplainer is original
    assert not isinstance(shap.Explainer(xgb_binary), shapfusion.TreeExplainer)


def test_a_series_and_a_dmatrix_are_rows(xgb_binary, data):
    import xgboost

    X = data.iloc[:20]
    explainer = shapfusion.TreeExplainer(xgb_binary)
    rows = explainer.shap_values(X)
    np.testing.assert_array_equal(explainer.shap_values(X.iloc[3]), rows[3])  # one row given flat, as shap takes it
    # A DMatrix stores no entry for a missing value; its rows are the frame's, NaN included.
    np.testing.assert_array_equal(explainer.shap_values(xgboost.DMatrix(X)), rows)
    explanation = explainer(xgboost.DMatrix(X))
    np.testing.assert_array_equal(explanation.data, X.to_numpy().astype(np.float32))  # what a DMatrix holds


def test_isolation_forest_values_reproduce_score_samples(data):
    from sklearn.ensemble import IsolationForest

    Xn = np.nan_to_num(data.to_numpy())
    forest = IsolationForest(n_estimators=10, random_state=0).fit(Xn)
    ours, theirs = shapfusion.TreeExplainer(forest), shap.TreeExplainer(forest)
    a, b = ours.shap_values(Xn[:30]), theirs.shap_values(Xn[:30], check_additivity=False)
    assert a.shape == b.shape == (30, Xn.shape[1]) and relative_error(a, b) < 1e-6
    assert abs(ours.expected_value - float(np.ravel(theirs.expected_value)[0])) < 1e-9
    # The values explain the mean path length E[h(x)]; score_samples is -2^(-E[h(x)] / c(n)).
    n = forest.max_samples_
    c = 2.0 * (np.log(n - 1.0) + np.euler_gamma) - 2.0 * (n - 1.0) / n
    np.testing.assert_allclose(-(2.0 ** (-(a.sum(axis=1) + ours.expected_value) / c)), forest.score_samples(Xn[:30]), atol=1e-9)


def test_lightgbm_categorical_splits_where_shap_interactions_are_wrong(lgb_categorical, categorical_data):
    """shap computes interaction values with its own C++ over the trees it reads from LightGBM's
    dump, which has no category sets: on this model (a pandas categorical column) shap 0.51
    raises instead ("could not convert string to float"). So shap is not the reference here:
    LightGBM's own pred_contrib is, and the interaction matrices must sum to it and be
    symmetric."""
    X = categorical_data.iloc[:40]
    explainer = shapfusion.TreeExplainer(lgb_categorical)
    values = explainer.shap_values(X)
    library = lgb_categorical.predict(X, pred_contrib=True)[:, :-1]
    assert relative_error(values, library) < 1e-6
    inter = explainer.shap_interaction_values(X)
    assert inter.shape == (40, X.shape[1], X.shape[1])
    np.testing.assert_allclose(inter.sum(axis=2), values, atol=1e-9)
    np.testing.assert_allclose(inter, inter.transpose(0, 2, 1), atol=1e-12)
