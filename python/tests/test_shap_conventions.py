"""shapfusion.TreeExplainer where shap's conventions, not its numbers, are what code written for
shap relies on: how columns meet features, one row given flat, ``explainer.model`` as shap's
``TreeEnsemble`` (checked by a brute force that reads only its arrays), path-dependent values
over a data set's covers, paths of more than 64 features, ``assert_additivity``'s layouts,
warnings, pickling, XGBoost's ``missing=``, and the models shap refuses that shapfusion explains
exactly (each against brute force or the library itself)."""

import itertools
import math
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
import shapfusion
from conftest import frame, labels, relative_error

shap = pytest.importorskip("shap")


# -- a brute force over shap's node arrays -------------------------------------------------------


def brute_force_over_view(view, x):
    """Exact path-dependent SHAP values of row ``x`` from ``explainer.model``'s arrays alone, under
    shap's conventions: left iff ``x <= threshold`` (missing: ``children_default``), a branch
    weighted by its ``node_sample_weight`` over its parent's (as XGBoost's and shap's TreeSHAP
    weigh them; XGBoost's float32 covers do not always add up), each tree's ``values`` per
    output. ``(F, G)``."""
    m = len(x)
    outputs = view.values.shape[2]
    cache = {}

    def expectation(S):
        if S not in cache:
            total = np.zeros(outputs)
            for t in range(view.children_left.shape[0]):
                stack, out = [(0, 1.0)], np.zeros(outputs)
                while stack:
                    node, weight = stack.pop()
                    left, right = view.children_left[t, node], view.children_right[t, node]
                    if left < 0:
                        out += weight * view.values[t, node]
                        continue
                    f = view.features[t, node]
                    if f in S:
                        if np.isnan(x[f]):
                            stack.append((view.children_default[t, node], weight))
                        else:
                            stack.append((left if x[f] <= view.thresholds[t, node] else right, weight))
                    else:
                        parent = view.node_sample_weight[t, node]
                        stack.append((left, weight * view.node_sample_weight[t, left] / parent))
                        stack.append((right, weight * view.node_sample_weight[t, right] / parent))
                total += out
            cache[S] = total
        return cache[S]

    phi = np.zeros((m, outputs))
    for i in range(m):
        others = [j for j in range(m) if j != i]
        for size in range(m):
            weight = math.factorial(size) * math.factorial(m - size - 1) / math.factorial(m)
            for S in itertools.combinations(others, size):
                phi[i] += weight * (expectation(frozenset(S) | {i}) - expectation(frozenset(S)))
    return phi


def check_view_reproduces_values(model, X):
    explainer = shapfusion.TreeExplainer(model)
    from shap.explainers._tree import SingleTree, TreeEnsemble

    view = explainer.model
    assert isinstance(view, TreeEnsemble) and all(isinstance(t, SingleTree) for t in view.trees)
    values = explainer.shap_values(X)
    values = values.reshape(values.shape[0], values.shape[1], -1)
    for r in range(len(X)):
        brute = brute_force_over_view(view, np.asarray(X, dtype=np.float64)[r])
        np.testing.assert_allclose(values[r], brute, rtol=1e-9, atol=1e-12)
    # The view predicts the model's margin.
    margin = explainer._explainer.predict_margin(X)
    np.testing.assert_allclose(view.predict(X, output="raw"), margin, atol=1e-12)
    return explainer


def float32_rows(n, features, seed, missing=0.0):
    """Rows as XGBoost, scikit-learn and CatBoost read them (rounded to float32), so comparisons
    with float32 thresholds are the library's."""
    return frame(n, features, seed, missing).to_numpy().astype(np.float32).astype(np.float64)


def test_the_model_view_is_shaps_tree_ensemble_and_reproduces_the_values():
    import catboost
    import lightgbm
    import xgboost
    from sklearn.ensemble import RandomForestRegressor

    X = float32_rows(300, 5, seed=7, missing=0.1)
    y = np.nan_to_num(X[:, 0]) - 2 * np.nan_to_num(X[:, 1]) * (np.nan_to_num(X[:, 2]) > 0)
    # XGBoost regressor (its x < t as shap's x <= next float below), missing values included.
    check_view_reproduces_values(xgboost.XGBRegressor(n_estimators=8, max_depth=3, nthread=2).fit(X, y), X[:4])
    # A classifier trained on a DMatrix, multiclass: one value per output per tree.
    booster = xgboost.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 3, "nthread": 2}, xgboost.DMatrix(X, label=labels(pd.DataFrame(X), 3, 1)), 4)
    check_view_reproduces_values(booster, X[:3])
    dense = np.nan_to_num(X)
    # A random forest regressor: each tree's values divided by the forest's size.
    check_view_reproduces_values(RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0).fit(dense, y), dense[:4])
    check_view_reproduces_values(lightgbm.LGBMRegressor(n_estimators=6, num_leaves=6, verbose=-1).fit(dense, y), dense[:4])
    check_view_reproduces_values(catboost.CatBoostRegressor(iterations=6, depth=3, verbose=0, allow_writing_files=False).fit(dense, y), dense[:3])


# -- columns ---------------------------------------------------------------------------------------


def test_lightgbm_names_with_spaces_match_the_frame_they_came_from():
    """LightGBM stores ``Marital Status`` as ``Marital_Status``; the frame still matches, with no
    warning, and the values are LightGBM's own."""
    import lightgbm

    X = frame(300, 4, seed=2, missing=0.0)
    X.columns = ["Marital Status", "Capital Gain", "Age", "Hours per week"]
    model = lightgbm.LGBMRegressor(n_estimators=10, verbose=-1).fit(X, X["Age"] * X["Capital Gain"])
    assert model.booster_.feature_name()[0] == "Marital_Status"
    explainer = shapfusion.TreeExplainer(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = explainer.shap_values(X.iloc[:20])
        explanation = explainer(X.iloc[:20])
    assert relative_error(values, model.predict(X.iloc[:20], pred_contrib=True)[:, :-1]) < 1e-9
    assert list(explanation.feature_names) == list(X.columns)  # the frame's names, as shap shows them


def test_other_names_are_taken_by_position_with_a_warning_and_unnamed_models_silently(xgb_binary, data):
    import xgboost

    X = data.iloc[:20]
    want = shapfusion.TreeExplainer(xgb_binary).shap_values(X)
    renamed = X.set_axis([f"col {j}" for j in range(X.shape[1])], axis=1)
    with pytest.warns(UserWarning, match="by position.*'col 0' as 'f_0'"):
        got = shapfusion.TreeExplainer(xgb_binary).shap_values(renamed)
    np.testing.assert_array_equal(got, want)
    # A model trained on a plain array has no names of its own: a frame's are not a mismatch.
    plain = xgboost.train({"max_depth": 3, "nthread": 2}, xgboost.DMatrix(X.to_numpy(), label=np.arange(20.0)), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(shapfusion.TreeExplainer(plain).shap_values(renamed), shapfusion.TreeExplainer(plain).shap_values(X.to_numpy()))
    # Named the model's way but in another order: by name (shap and LightGBM would take them by
    # position and mix the features up; XGBoost and scikit-learn refuse the frame).
    np.testing.assert_array_equal(shapfusion.TreeExplainer(xgb_binary).shap_values(X[X.columns[::-1]]), want)
    # Neither every name nor the model's count of columns: refused, naming what is missing.
    with pytest.raises(ValueError, match=r"X has 3 columns and lacks the model's features 'f_3'"):
        shapfusion.TreeExplainer(xgb_binary).shap_values(X[["f_0", "f_1", "f_2"]])


def test_a_background_frame_is_matched_as_the_rows_are(xgb_binary, data):
    background = data.iloc[100:160]
    want = shapfusion.TreeExplainer(xgb_binary, data=background).shap_values(data.iloc[:10])
    renamed = background.set_axis([c.upper() for c in background.columns], axis=1)
    with pytest.warns(UserWarning, match="data's column names"):
        explainer = shapfusion.TreeExplainer(xgb_binary, data=renamed)
    np.testing.assert_array_equal(explainer.shap_values(data.iloc[:10]), want)


# -- one row given flat ----------------------------------------------------------------------------


def test_one_row_given_flat_gives_flat_values_as_shap_does(xgb_binary, xgb_multiclass, data):
    X = data.iloc[:5]
    explainer = shapfusion.TreeExplainer(xgb_binary)
    rows = explainer.shap_values(X)
    np.testing.assert_array_equal(explainer.shap_values(X.to_numpy()[2]), rows[2])
    np.testing.assert_array_equal(explainer.shap_values(list(X.to_numpy()[2])), rows[2])
    np.testing.assert_array_equal(explainer.shap_values(X.iloc[2]), rows[2])  # a Series: its index names the features
    assert explainer.shap_interaction_values(X.to_numpy()[2]).shape == (X.shape[1], X.shape[1])
    assert explainer.model.predict(X.to_numpy()[2]).shape == ()
    explanation = explainer(X.to_numpy()[2])
    np.testing.assert_array_equal(explanation.values, rows[2])
    np.testing.assert_array_equal(explanation.data, X.to_numpy()[2])
    # shap's base values for a flat row: the expected value once per feature; code reads [0].
    assert explanation.base_values[0] == explainer.expected_value
    multi = shapfusion.TreeExplainer(xgb_multiclass)
    flat = multi(X.to_numpy()[0], interactions=True)
    assert flat.values.shape == (X.shape[1], X.shape[1], 3)
    margin = multi.model.predict(X.to_numpy()[:1], output="raw")[0]
    np.testing.assert_allclose(flat.values.sum((0, 1)) + flat.base_values[0], margin, atol=1e-9)


# -- path-dependent over a data set ----------------------------------------------------------------


def test_path_dependent_with_data_counts_covers_from_the_data_as_shap_does(xgb_binary, data):
    from sklearn.ensemble import RandomForestRegressor

    Xn = np.nan_to_num(data.to_numpy()).astype(np.float32).astype(np.float64)
    forest = RandomForestRegressor(n_estimators=6, max_depth=5, random_state=0).fit(Xn, Xn[:, 0] - Xn[:, 1] * Xn[:, 2])
    for model, X, background in [(forest, Xn[:25], Xn[300:330]), (xgb_binary, data.iloc[:25], data.iloc[300:330])]:
        ours = shapfusion.TreeExplainer(model, data=background, feature_perturbation="tree_path_dependent")
        assert ours.feature_perturbation == "tree_path_dependent"
        values = ours.shap_values(X)
        margin = ours.model.predict(X, output="raw")
        np.testing.assert_allclose(values.sum(axis=1) + ours.expected_value, margin, atol=1e-9)
        # The expected value is the data's mean output (nodes it never reaches weigh 1e-6).
        assert abs(ours.expected_value - ours.model.predict(background, output="raw").mean()) < 1e-5
        assert any(np.any(t.node_sample_weight == 1e-6) for t in ours.model.trees)
        theirs = shap.TreeExplainer(model, data=background, feature_perturbation="tree_path_dependent")
        assert relative_error(values, theirs.shap_values(X, check_additivity=False)) < 1e-5
        assert abs(ours.expected_value - float(np.ravel(theirs.expected_value)[0])) < 1e-5


# -- interventional, any path length ---------------------------------------------------------------


def test_interventional_values_of_paths_with_more_than_64_features_are_shaps_and_add_up():
    """A forest of unpruned trees on sparse bag-of-words rows (shap's own newsgroups test): paths
    of well over 64 distinct features."""
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(11)
    # Sparse binary rows with labels no few words decide: each split peels off a few rows.
    X = (rng.random((400, 1000)) < 0.01).astype(np.float64)
    y = rng.integers(0, 2, len(X))
    forest = RandomForestClassifier(n_estimators=3, max_features=None, bootstrap=False, random_state=0).fit(X, y)
    assert max(distinct_path_features(e.tree_) for e in forest.estimators_) > 64
    background, rows = X[:20], X[350:354]
    ours = shapfusion.TreeExplainer(forest, data=background)
    values = ours.shap_values(rows)
    np.testing.assert_allclose(values.sum(axis=1) + ours.expected_value, forest.predict_proba(rows), atol=1e-9)
    # The reference engine follows the definition background row by background row.
    reference = shapfusion.Explainer(forest, background=background, algorithm="treeshap").shap_values(rows)
    assert relative_error(values, np.ascontiguousarray(reference[..., :-1].transpose(0, 2, 1))) < 1e-12
    # shap's own add up to float32 precision only (off by about 2e-8 here).
    theirs = shap.TreeExplainer(forest, data=shap.maskers.Independent(background, max_samples=len(background)))
    assert relative_error(values, theirs.shap_values(rows, check_additivity=False)) < 1e-6


def distinct_path_features(tree) -> int:
    """The most distinct features on one root-to-leaf path of a scikit-learn tree."""
    best, stack = 0, [(0, frozenset())]
    while stack:
        node, features = stack.pop()
        if tree.children_left[node] < 0:
            best = max(best, len(features))
            continue
        features = features | {int(tree.feature[node])}
        stack.extend([(tree.children_left[node], features), (tree.children_right[node], features)])
    return best


# -- shap's other entry points ---------------------------------------------------------------------


def test_assert_additivity_takes_shaps_layouts_and_raises_its_error(xgb_multiclass, xgb_binary, data):
    from shap.utils._exceptions import ExplainerError

    X = data.iloc[:10]
    multi = shapfusion.TreeExplainer(xgb_multiclass)
    values = multi.shap_values(X)
    margin = multi.model.predict(X, output="raw")
    multi.assert_additivity(values, margin)
    multi.assert_additivity([values[..., k] for k in range(3)], margin)  # shap's list layout
    with pytest.raises(ExplainerError, match="Additivity check failed"):
        multi.assert_additivity([values[..., k] + 0.5 for k in range(3)], margin)
    binary = shapfusion.TreeExplainer(xgb_binary)
    with pytest.raises(ValueError, match="Additivity check failed"):  # also a ValueError
        binary.assert_additivity(binary.shap_values(X) * 2 + 1, binary.model.predict(X, output="raw"))


def test_shaps_warnings(xgb_binary):
    with pytest.warns(FutureWarning, match="without providing a background dataset"):
        explainer = shapfusion.TreeExplainer(xgb_binary, feature_perturbation="interventional")
    assert explainer.feature_perturbation == "tree_path_dependent"
    with pytest.warns(DeprecationWarning, match="approximate argument has been deprecated"):
        shapfusion.TreeExplainer(xgb_binary, approximate=True)


def test_explainers_pickle_and_give_the_same_values(xgb_binary, data, tmp_path):
    X = data.iloc[:15]
    path = tmp_path / "model.json"
    xgb_binary.save_model(str(path))
    from_path = shapfusion.Explainer(str(path), threads=1)
    for explainer in (shapfusion.TreeExplainer(xgb_binary, data=data.iloc[200:260]), from_path):
        again = pickle.loads(pickle.dumps(explainer))
        np.testing.assert_array_equal(again.shap_values(X), explainer.shap_values(X))
    # A path's content travels, not the path.
    blob = pickle.dumps(from_path)
    path.unlink()
    np.testing.assert_array_equal(pickle.loads(blob).shap_values(X), from_path.shap_values(X))


def test_shaps_explainer_attributes_and_save_and_load(xgb_binary, data, tmp_path):
    """What shap's Explainer exposes beside the values: link, linearize_link, output_names,
    masker (every background row), supports_model_with_masker, and save/load."""
    background = data.iloc[200:260]
    ours, theirs = shapfusion.TreeExplainer(xgb_binary, data=background), shap.TreeExplainer(xgb_binary, data=background)
    assert ours.link is theirs.link and ours.linearize_link == theirs.linearize_link and ours.output_names is theirs.output_names
    assert isinstance(ours.masker, shap.maskers.Independent) and ours.masker.data.shape == background.shape
    masker = shap.maskers.Independent(background, max_samples=len(background))
    assert shapfusion.TreeExplainer(xgb_binary, data=masker).masker is masker
    assert shapfusion.TreeExplainer(xgb_binary).masker is None
    assert shapfusion.TreeExplainer.supports_model_with_masker(xgb_binary, None)
    assert shapfusion.TreeExplainer.supports_model_with_masker(xgb_binary, masker)
    assert not shapfusion.TreeExplainer.supports_model_with_masker(object(), None)
    assert not shapfusion.TreeExplainer.supports_model_with_masker(xgb_binary, shap.maskers.Partition(background))
    with open(tmp_path / "explainer.bin", "wb") as f:
        ours.save(f)
    with open(tmp_path / "explainer.bin", "rb") as f:
        again = shapfusion.TreeExplainer.load(f)
    np.testing.assert_array_equal(again.shap_values(data.iloc[:10]), ours.shap_values(data.iloc[:10]))
    with open(tmp_path / "other.bin", "wb") as f:
        pickle.dump([1, 2], f)
    with open(tmp_path / "other.bin", "rb") as f, pytest.raises(TypeError, match="not a shapfusion.TreeExplainer"):
        shapfusion.TreeExplainer.load(f)


def test_xgboosts_missing_parameter_marks_missing_values_as_its_predict_does(data):
    import xgboost

    X = np.nan_to_num(data.to_numpy(), nan=1e-8)
    y = labels(data, 2, 3)
    clf = xgboost.XGBClassifier(missing=1e-8, n_estimators=10, max_depth=3, nthread=2).fit(X, y)
    explainer = shapfusion.TreeExplainer(clf)
    values = explainer.shap_values(X[:30])
    np.testing.assert_allclose(values.sum(axis=1) + explainer.expected_value, clf.predict(X[:30], output_margin=True), atol=1e-5)
    contribs = clf.get_booster().predict(xgboost.DMatrix(X[:30], missing=1e-8), pred_contribs=True)[:, :-1]
    assert relative_error(values, contribs) < 1e-5
    np.testing.assert_array_equal(shapfusion.Explainer(clf).shap_values(X[:30]), shapfusion.Explainer(clf.get_booster()).shap_values(np.where(X[:30] == 1e-8, np.nan, X[:30])))


# -- what shap refuses and shapfusion computes, exactly --------------------------------------------


def test_a_gradient_boosting_classifier_with_a_zero_init_is_explained_exactly():
    """shap refuses ``init="zero"`` (InvalidModelError); the margin then starts at 0, and the values
    are the brute force over the model's own trees and add up to its decision function."""
    from sklearn.ensemble import GradientBoostingClassifier

    X = float32_rows(300, 4, seed=9)
    clf = GradientBoostingClassifier(init="zero", n_estimators=6, max_depth=2, random_state=0).fit(X, labels(pd.DataFrame(X), 2, 4))
    with pytest.raises(Exception, match="init"):
        shap.TreeExplainer(clf)
    explainer = check_view_reproduces_values(clf, X[:4])
    np.testing.assert_allclose(explainer.shap_values(X[:30]).sum(axis=1) + explainer.expected_value, clf.decision_function(X[:30]), atol=1e-9)


def test_xgboost_random_forests_predict_and_explain_exactly(data):
    """shap refuses ``explainer.model.predict`` for XGBoost's random forests; shapfusion's view
    predicts XGBoost's margin and the values are XGBoost's exact pred_contribs (XGBoost 3.2)."""
    import xgboost

    X = data.iloc[:30]
    clf = xgboost.XGBRFClassifier(n_estimators=4, max_depth=3, nthread=2).fit(data, labels(data, 2, 5))
    explainer = shapfusion.TreeExplainer(clf)
    np.testing.assert_allclose(explainer.model.predict(X, output="raw"), clf.predict(X, output_margin=True), atol=1e-5)
    contribs = clf.get_booster().predict(xgboost.DMatrix(X), pred_contribs=True)[:, :-1]
    assert relative_error(explainer.shap_values(X), contribs) < 1e-5


def test_a_numeric_catboost_pool_is_rows_and_one_with_categories_is_refused_by_name():
    import catboost

    X = frame(200, 3, seed=12, missing=0.0)
    model = catboost.CatBoostRegressor(iterations=5, depth=3, verbose=0, allow_writing_files=False).fit(X, X["f_0"] * X["f_1"])
    explainer = shapfusion.TreeExplainer(model)
    np.testing.assert_array_equal(explainer.shap_values(catboost.Pool(X.iloc[:10])), explainer.shap_values(X.iloc[:10]))
    with_categories = X.assign(colour=["red", "blue"] * 100)
    pool = catboost.Pool(with_categories.iloc[:10], cat_features=["colour"])
    with pytest.raises(ValueError, match="categorical features keeps only their hashes"):
        shapfusion.Explainer(model).shap_values(pool)
