"""The shapfusion trees file: fitted scikit-learn estimators as plain node arrays.

``save_model(estimator, path)`` writes the documented, versioned JSON that every shapfusion
front end reads (``docs/src/trees-file.md``): the command line, SQL, the Flight workers and
Ballista load it without Python and without unpickling anything. ``Explainer(estimator)``
goes through the same bytes, so every front end computes the same numbers.

What each estimator's trees compute is what shap's ``TreeExplainer`` explains for it:

* ``DecisionTree*``, ``ExtraTree*``, ``RandomForest*``, ``ExtraTrees*``: regressors give
  their prediction per output; classifiers give class probabilities (the normalised class
  weights of each leaf, averaged over a forest's trees), one output per class.
* ``GradientBoosting*``: the raw margin (``decision_function``), the ``init_`` estimator's
  constant as the base margin and ``learning_rate`` as every tree's weight; a multiclass
  classifier has one output per class.
* ``HistGradientBoosting*``: the raw margin, missing values through ``missing_go_to_left`` and
  categorical splits as category sets (integer-coded categories).
* ``IsolationForest``: the mean path length E[h(x)] that shap explains (leaf value: its depth
  plus the average path length of its samples), ``score_samples = -2 ** (-E[h(x)] / c(n))``.

Covers are the weighted sample counts, as shap uses (``count`` for HistGradientBoosting).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

#: The version of the file this module writes (``NEUTRAL_FORMAT_VERSION`` in the Rust crate).
FORMAT_VERSION = 1

_FORMAT_TAG = "shapfusion.trees"


def is_sklearn_estimator(model: Any) -> bool:
    """Whether ``model`` is a scikit-learn estimator this module exports."""
    return (type(model).__module__ or "").startswith("sklearn.")


def to_dict(estimator: Any) -> dict[str, Any]:
    """The shapfusion trees file of a fitted scikit-learn tree estimator, as a dict."""
    kind = type(estimator).__name__
    exporter = _EXPORTERS.get(kind)
    if exporter is None:
        raise TypeError(f"shapfusion does not read scikit-learn {kind}; it reads {', '.join(sorted(_EXPORTERS))}")
    _check_fitted(estimator, kind)
    import sklearn

    body = exporter(estimator)
    n_features = int(estimator.n_features_in_)
    names = getattr(estimator, "feature_names_in_", None)
    feature_names = [str(n) for n in names] if names is not None else [f"f{j}" for j in range(n_features)]
    out = {
        "format": _FORMAT_TAG,
        "format_version": FORMAT_VERSION,
        "producer": {"library": "scikit-learn", "version": sklearn.__version__, "estimator": f"sklearn {kind}"},
        "objective": body["objective"],
        "feature_names": feature_names,
        "num_outputs": body["num_outputs"],
        "base_margin": [float(b) for b in body["base_margin"]],
        "input_precision": body.get("input_precision", "float32"),
        "trees": body["trees"],
    }
    if body.get("categorical_features"):
        out["categorical_features"] = body["categorical_features"]
    if body.get("categories"):
        out["categories"] = body["categories"]
    return out


def to_json_bytes(estimator: Any) -> bytes:
    """The shapfusion trees file of ``estimator``, as UTF-8 JSON bytes."""
    # Floats print with repr (shortest round trip), so the file holds the estimator's exact
    # float64 values; NaN and infinity are not JSON and are refused.
    return json.dumps(to_dict(estimator), allow_nan=False, separators=(",", ":")).encode("utf-8")


def save_model(estimator: Any, path: str | os.PathLike[str]) -> None:
    """Writes a fitted scikit-learn tree estimator as a shapfusion trees file.

    ``shapfusion explain --model PATH``, ``shapfusion sql``, the Flight workers and
    ``shapfusion.Explainer(PATH)`` read it; no pickle is ever read. The file is written to a
    temporary name beside ``path`` and renamed, so an interrupted save leaves any old file
    intact. Raises ``TypeError`` for an estimator shapfusion does not read and ``ValueError``
    for one that is not fitted.
    """
    data = to_json_bytes(estimator)
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# -- estimators ---------------------------------------------------------------------------


def _check_fitted(estimator: Any, kind: str) -> None:
    if not hasattr(estimator, "n_features_in_"):
        raise ValueError(f"this {kind} is not fitted: call fit before explaining or saving it")


def _tree_arrays(tree: Any, values: np.ndarray, output: int, weight: float, features: np.ndarray | None = None) -> dict[str, Any]:
    """One sklearn ``Tree`` (its parallel node arrays) with leaf values ``values``."""
    left = np.asarray(tree.children_left, dtype=np.int64)
    right = np.asarray(tree.children_right, dtype=np.int64)
    feature = np.asarray(tree.feature, dtype=np.int64)
    if features is not None:  # IsolationForest: each tree sees a subset of the columns
        feature = np.where(feature >= 0, np.asarray(features)[np.maximum(feature, 0)], feature)
    missing = getattr(tree, "missing_go_to_left", None)
    missing_left = np.zeros(len(left), dtype=bool) if missing is None else np.asarray(missing).astype(bool)
    return {
        "output": int(output),
        "weight": float(weight),
        "left": left.tolist(),
        "right": right.tolist(),
        "feature": feature.tolist(),
        "threshold": _finite(tree.threshold),
        "missing_left": missing_left.tolist(),
        "cover": np.asarray(tree.weighted_n_node_samples, dtype=np.float64).tolist(),
        "value": np.asarray(values, dtype=np.float64).tolist(),
    }


def _finite(thresholds: np.ndarray) -> list[float]:
    """Thresholds with infinities replaced by the largest finite doubles. A split trained with
    missing values may send every number left (threshold +inf); scikit-learn refuses infinite
    inputs, so ``x <= float64 max`` decides every row it takes the same way."""
    t = np.asarray(thresholds, dtype=np.float64)
    big = np.finfo(np.float64).max
    finite: list[float] = np.clip(t, -big, big).tolist()
    return finite


def _regression_trees(trees: list[Any], weight: float) -> dict[str, Any]:
    n_outputs = int(trees[0].tree_.n_outputs)
    out = []
    for e in trees:
        value = e.tree_.value  # (nodes, outputs, 1)
        for k in range(n_outputs):
            out.append(_tree_arrays(e.tree_, value[:, k, 0], k, weight))
    return {"objective": "regression", "num_outputs": n_outputs, "base_margin": [0.0] * n_outputs, "trees": out}


def _classification_trees(trees: list[Any], weight: float, kind: str) -> dict[str, Any]:
    if trees[0].tree_.n_outputs != 1:
        raise NotImplementedError(f"multi-output {kind} (several targets of classes) is not read by shapfusion")
    n_classes = int(trees[0].tree_.n_classes[0])
    out = []
    for e in trees:
        value = np.asarray(e.tree_.value[:, 0, :], dtype=np.float64)
        total = value.sum(axis=1, keepdims=True)
        proba = np.divide(value, total, out=np.zeros_like(value), where=total > 0)
        for k in range(n_classes):
            out.append(_tree_arrays(e.tree_, proba[:, k], k, weight))
    return {"objective": "class probabilities", "num_outputs": n_classes, "base_margin": [0.0] * n_classes, "trees": out}


def _decision_tree_regressor(m: Any) -> dict[str, Any]:
    return _regression_trees([m], 1.0)


def _decision_tree_classifier(m: Any) -> dict[str, Any]:
    return _classification_trees([m], 1.0, type(m).__name__)


def _forest_regressor(m: Any) -> dict[str, Any]:
    return _regression_trees(list(m.estimators_), 1.0 / len(m.estimators_))


def _forest_classifier(m: Any) -> dict[str, Any]:
    return _classification_trees(list(m.estimators_), 1.0 / len(m.estimators_), type(m).__name__)


def _gradient_boosting(m: Any) -> dict[str, Any]:
    kind = type(m).__name__
    init = m.init_
    if not (init == "zero" or type(init).__name__ in ("DummyRegressor", "DummyClassifier")):
        raise NotImplementedError(
            f"{kind} with init={type(init).__name__}: its baseline depends on the row; shapfusion "
            "reads the default init (a constant) and init='zero'"
        )
    estimators = m.estimators_  # (n_estimators, K)
    k_out = estimators.shape[1]
    lr = float(m.learning_rate)
    trees = [_tree_arrays(e.tree_, e.tree_.value[:, 0, 0], k, lr) for row in estimators for k, e in enumerate(row)]
    # The base margin: the raw prediction of a probe row less its trees, which is the init
    # estimator's constant in the loss's link space, whatever the sklearn version stores it as.
    probe = np.zeros((1, m.n_features_in_), dtype=np.float64)
    raw = m.decision_function(probe) if hasattr(m, "decision_function") else m.predict(probe)
    raw = np.asarray(raw, dtype=np.float64).reshape(-1)
    sums = np.zeros(k_out)
    for row in estimators:
        for k, e in enumerate(row):
            sums[k] += lr * float(e.predict(probe.astype(np.float32))[0])
    base = raw - sums
    objective = f"raw margin ({getattr(m, 'loss', '')})".replace(" ()", "")
    return {"objective": objective, "num_outputs": k_out, "base_margin": base.tolist(), "trees": trees}


def _hist_gradient_boosting(m: Any) -> dict[str, Any]:
    n_features = int(m.n_features_in_)
    # With categorical features, scikit-learn 1.4+ encodes them first (an OrdinalEncoder, unknown
    # values to NaN) and moves them in front of the numeric columns: the trees' feature indices
    # and category codes refer to that encoded order, mapped back to the user's columns here.
    pre = getattr(m, "_preprocessor", None)
    encoder_categories: list[np.ndarray] = []
    column_of = np.arange(n_features)
    if pre is not None:
        masks = {name: np.asarray(mask) for name, _, mask in pre.transformers_ if not isinstance(mask, list)}
        categorical_mask = masks.get("encoder", np.zeros(n_features, dtype=bool)).astype(bool)
        column_of = np.r_[np.flatnonzero(categorical_mask), np.flatnonzero(~categorical_mask)]
        encoder_categories = list(pre.named_transformers_["encoder"].categories_) if categorical_mask.any() else []
    known_bitsets, f_idx_map = m._bin_mapper.make_known_categories_bitsets()
    string_categories: dict[str, list[str]] = {}
    categorical: list[int] = []

    def category_sets(encoded_feature: int, left_codes: list[int], known_codes: list[int]) -> tuple[int, list[int], list[int]]:
        """The split's sets in the values the user passes: the raw category values for numeric
        categories, the codes of the stored category names for strings."""
        column = int(column_of[encoded_feature])
        if encoded_feature >= len(encoder_categories):
            return column, left_codes, known_codes
        raw = encoder_categories[encoded_feature]
        if raw.dtype.kind in "iuf":
            values = np.asarray(raw, dtype=np.float64)
            if not np.all((values >= 0) & (values == np.floor(values)) & (values < 2**24)):
                raise NotImplementedError(
                    f"{type(m).__name__}: categorical column {column} has categories {values[:5].tolist()}...; "
                    "shapfusion reads non-negative integer categories or strings"
                )
            return column, [int(values[k]) for k in left_codes], [int(values[k]) for k in known_codes]
        string_categories[str(column)] = [str(v) for v in raw]
        return column, left_codes, known_codes

    trees = []
    for iteration in m._predictors:
        for k, predictor in enumerate(iteration):
            nodes = predictor.nodes
            leaf = nodes["is_leaf"].astype(bool)
            left = np.where(leaf, -1, nodes["left"].astype(np.int64))
            right = np.where(leaf, -1, nodes["right"].astype(np.int64))
            features = np.where(leaf, -2, column_of[np.where(leaf, 0, nodes["feature_idx"].astype(np.int64))])
            tree = {
                "output": k,
                "weight": 1.0,
                "left": left.tolist(),
                "right": right.tolist(),
                "feature": features.tolist(),
                "threshold": _finite(nodes["num_threshold"]),
                "missing_left": nodes["missing_go_to_left"].astype(bool).tolist(),
                "cover": nodes["count"].astype(np.float64).tolist(),
                "value": nodes["value"].astype(np.float64).tolist(),
            }
            splits = []
            for i in np.flatnonzero(nodes["is_categorical"].astype(bool) & ~leaf):
                encoded = int(nodes["feature_idx"][i])
                left_codes = _bitset_codes(predictor.raw_left_cat_bitsets[nodes["bitset_idx"][i]])
                known = _bitset_codes(known_bitsets[f_idx_map[encoded]])
                column, left_set, known_set = category_sets(encoded, left_codes, known)
                if column not in categorical:
                    categorical.append(column)
                splits.append({"node": int(i), "left_categories": left_set, "known_categories": known_set})
            if splits:
                tree["categorical_splits"] = splits
            trees.append(tree)
    k_out = len(m._predictors[0]) if m._predictors else 1
    base = np.asarray(m._baseline_prediction, dtype=np.float64).reshape(-1)
    if base.size == 1 and k_out > 1:
        base = np.repeat(base, k_out)
    body = {
        "objective": f"raw margin ({m.loss})" if isinstance(getattr(m, "loss", None), str) else "raw margin",
        "num_outputs": k_out,
        "base_margin": base.tolist(),
        "input_precision": "float64",
        "categorical_features": sorted(categorical),
        "trees": trees,
    }
    if string_categories:
        body["categories"] = string_categories
    return body


def _bitset_codes(bitset: np.ndarray) -> list[int]:
    """The codes set in a scikit-learn category bitset (8 words of 32 bits)."""
    words = np.asarray(bitset, dtype=np.uint32)
    return [int(32 * w + b) for w in range(len(words)) for b in range(32) if (int(words[w]) >> b) & 1]


def _isolation_forest(m: Any) -> dict[str, Any]:
    from sklearn.ensemble._iforest import _average_path_length

    trees = []
    weight = 1.0 / len(m.estimators_)
    for e, features in zip(m.estimators_, m.estimators_features_):
        t = e.tree_
        depth = np.zeros(t.node_count, dtype=np.float64)
        for i in range(t.node_count):  # children follow their parent in sklearn's node order
            for c in (t.children_left[i], t.children_right[i]):
                if c >= 0:
                    depth[c] = depth[i] + 1
        values = depth + _average_path_length(np.asarray(t.n_node_samples))
        trees.append(_tree_arrays(t, values, 0, weight, features=features))
    return {"objective": "isolation forest mean path length E[h(x)]", "num_outputs": 1, "base_margin": [0.0], "trees": trees}


_EXPORTERS = {
    "DecisionTreeRegressor": _decision_tree_regressor,
    "ExtraTreeRegressor": _decision_tree_regressor,
    "DecisionTreeClassifier": _decision_tree_classifier,
    "ExtraTreeClassifier": _decision_tree_classifier,
    "RandomForestRegressor": _forest_regressor,
    "ExtraTreesRegressor": _forest_regressor,
    "RandomForestClassifier": _forest_classifier,
    "ExtraTreesClassifier": _forest_classifier,
    "GradientBoostingRegressor": _gradient_boosting,
    "GradientBoostingClassifier": _gradient_boosting,
    "HistGradientBoostingRegressor": _hist_gradient_boosting,
    "HistGradientBoostingClassifier": _hist_gradient_boosting,
    "IsolationForest": _isolation_forest,
}
