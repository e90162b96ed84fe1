"""``shapfusion.TreeExplainer``: shap's ``TreeExplainer`` interface over shapfusion's engines.

The constructor takes shap's arguments and resolves ``feature_perturbation`` as shap does;
``data`` may be rows, a DataFrame or a ``shap.maskers.Independent`` masker, and every row is
used (shap keeps a random 100 of a larger background). ``shap_values``,
``shap_interaction_values``, ``expected_value`` and ``explainer(X)`` (a ``shap.Explanation``)
have shap's layouts; ``explainer.model`` is a view of the trees with shap's node arrays and
``predict``. ``model_output`` is ``"raw"``, ``"probability"`` or ``"predict_proba"`` (the last
two interventional, as in shap). What is not built yet raises ``NotImplementedError`` naming
it: ``model_output="log_loss"`` and probabilities of multiclass log-odds (softmax) models.
``approximate=True`` gives Saabas values, as shap does. ``patch_shap()`` makes shap itself use this class
(``shap.TreeExplainer``, ``shap.explainers.Tree`` and the tree choice of ``shap.Explainer``);
``unpatch_shap()`` undoes it.

Layouts, as shap gives them: one output (regressors, binary XGBoost/LightGBM/CatBoost models,
binary GradientBoosting, IsolationForest) gives ``(n, F)`` values and a float
``expected_value``; several (classes of a classifier, also binary scikit-learn forests and
trees, which explain both class probabilities; targets of a multi-output model;
``model_output="predict_proba"`` of a binary log-odds model, as ``[1 - p, p]``) give
``(n, F, G)`` and a vector. ``expected_value`` is the model's own: for XGBoost multiclass
models it includes the per-class base score, which shap's misses.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import Explainer, _model_source, _plain_rows, _trees_file

__all__ = ["TreeExplainer", "patch_shap", "unpatch_shap"]

#: Objectives whose trees add up to log-odds of the positive class (shap's "log_odds" tree
#: output), as the model files name them: XGBoost, LightGBM (first word of its objective line)
#: and CatBoost.
_LOG_ODDS_OBJECTIVES = {"binary:logistic", "reg:logistic", "binary", "cross_entropy", "xentropy", "Logloss", "CrossEntropy"}


class TreeExplainer:
    """Exact SHAP values of a tree model with shap's ``TreeExplainer`` interface.

    Parameters are shap's. ``data`` (rows, a DataFrame or a ``shap.maskers.Independent``
    masker) makes the values interventional over every background row; without it they are
    path-dependent (what the libraries' own ``pred_contribs`` compute). ``model_output``:
    ``"raw"`` (the margin), ``"probability"`` (log-odds models: the logistic of the margin, each
    background row's values rescaled as shap does; probability trees: their output) or
    ``"predict_proba"`` (classifiers: one output per class, ``[1 - p, p]`` for binary log-odds
    models); both need ``data``. ``threads`` (not shap's) bounds the compute threads.
    """

    def __init__(
        self,
        model: Any,
        data: Any = None,
        model_output: str = "raw",
        feature_perturbation: str = "auto",
        feature_names: Optional[list] = None,
        approximate: bool = False,
        link: Any = None,
        linearize_link: Any = None,
        threads: Optional[int] = None,
    ) -> None:
        if approximate:
            warnings.warn(
                "The approximate argument of the constructor is deprecated (as in shap 0.47+); pass approximate=True to shap_values or __call__ instead.",
                FutureWarning,
                stacklevel=2,
            )
        self._approximate = bool(approximate)
        if link is not None and getattr(link, "__name__", str(link)) not in ("identity", "IdentityLink"):
            raise NotImplementedError(f"shapfusion.TreeExplainer: link={link!r} is not built yet; the identity link is")
        background = _background_rows(data)
        if feature_perturbation == "auto":
            feature_perturbation = "interventional" if background is not None else "tree_path_dependent"
        elif feature_perturbation == "interventional" and background is None:
            warnings.warn(
                "Setting feature_perturbation = \"tree_path_dependent\" because no background data was given.",
                stacklevel=2,
            )
            feature_perturbation = "tree_path_dependent"
        elif feature_perturbation not in ("interventional", "tree_path_dependent"):
            raise _shap_error("InvalidFeaturePerturbationError", ValueError)(
                f"feature_perturbation must be 'auto', 'interventional', or 'tree_path_dependent'. Got {feature_perturbation} instead."
            )
        if model_output != "raw" and feature_perturbation == "tree_path_dependent":
            raise ValueError('Only model_output="raw" is supported for feature_perturbation="tree_path_dependent"')
        self.data = background
        self.model_output = model_output
        self.feature_perturbation = feature_perturbation
        self._threads = threads
        self._background = background if feature_perturbation == "interventional" else None
        # The model read once (a scikit-learn or CatBoost model is converted once), then its
        # objective and output count, from an explainer with no set-up, decide the transform.
        try:
            path, source, _ = _model_source(model)
        except TypeError as e:
            raise _shap_error("InvalidModelError", TypeError)(f"Model type not yet supported by TreeExplainer: {type(model)} ({e})") from e
        self._source = path if path is not None else source
        info = Explainer(self._source, algorithm="treeshap", threads=threads)
        self._transform, self._doubled = _resolve_output(model, model_output, info._native.objective, info.num_groups)
        self._num_trees = info._native.num_trees
        self._default_limit = _default_tree_limit(model, self._num_trees)
        self._explainers: Dict[Optional[int], Explainer] = {}
        self._explainer = self._for_limit(self._default_limit)
        self.model = TreeEnsembleView(model, self, self._explainer)
        self.feature_names = list(feature_names) if feature_names is not None else list(self._explainer.feature_names)
        self._groups = self._explainer.num_groups
        self._expected = None

    # -- what shap exposes ---------------------------------------------------------------

    @property
    def expected_value(self):
        """The mean output: over the background (interventional; of the probability for
        ``model_output="probability"``), or the cover-weighted mean of the trees
        (path-dependent). A float for one output, an array for several."""
        if self._expected is None:
            zeros = np.zeros((1, len(self._explainer.feature_names)))
            bias = self._explainer.shap_values(zeros)[..., -1].reshape(-1)
            if self._doubled:
                bias = np.array([1.0 - bias[0], bias[0]])
            self._expected = float(bias[0]) if bias.size == 1 else bias
        return self._expected

    def shap_values(self, X: Any, y: Any = None, tree_limit: Optional[int] = None, approximate: bool = False, check_additivity: bool = True):
        """SHAP values in shap's layout: ``(n, F)`` for one output, ``(n, F, G)`` for several.

        ``approximate=True`` gives Saabas values instead (see ``Explainer.saabas_values``): what
        shap computes for XGBoost (XGBoost's ``approx_contribs``) and for scikit-learn forests;
        shap refuses them for LightGBM and CatBoost, shapfusion computes them the same way.

        ``tree_limit`` explains the model's first trees only, counted as shap counts them
        (XGBoost: trees, rounded down to whole rounds; LightGBM: iterations; scikit-learn:
        estimators); ``-1`` is all of them. ``check_additivity`` checks that each row's values
        and the expected value add up to the model's output (shapfusion's margin, which the
        tests check against each library's, or its transform)."""
        approximate = approximate or self._approximate
        if approximate and self._transform != "identity":
            raise NotImplementedError(f"shapfusion.TreeExplainer: approximate=True with model_output={self.model_output!r} is not built yet; Saabas values attribute the margin")
        explainer = self._for_limit(self._native_limit(tree_limit))
        phi = explainer.saabas_values(X) if approximate else explainer.shap_values(X)
        if check_additivity:
            output = self._transformed(explainer.predict_margin(X))
            total = phi.sum(axis=-1)
            scale = max(float(np.abs(phi).max()) if phi.size else 0.0, 1.0)
            if phi.size and np.abs(total - output).max() > 1e-6 * scale:
                raise ValueError("Additivity check failed in TreeExplainer! The SHAP values and the expected value do not add up to the model's output.")
        values = phi[..., :-1]
        if self._doubled:
            return np.stack([-values, values], axis=-1)
        if self._groups == 1:
            return values
        return np.ascontiguousarray(values.transpose(0, 2, 1))

    def shap_interaction_values(self, X: Any, y: Any = None, tree_limit: Optional[int] = None):
        """Interaction values in shap's layout: ``(n, F, F)`` for one output, ``(n, F, F, G)``
        for several (the bias row and column of XGBoost's layout left out)."""
        if self.model_output != "raw":
            raise ValueError('Only model_output = "raw" is supported for SHAP interaction values right now!')
        if self.feature_perturbation == "interventional":
            raise NotImplementedError("shapfusion.TreeExplainer: interaction values are path-dependent only (as in shap); build the explainer without data")
        inter = self._for_limit(self._native_limit(tree_limit)).interactions(X)[..., :-1, :-1]
        if self._groups == 1:
            return inter
        return np.ascontiguousarray(inter.transpose(0, 2, 3, 1))

    def __call__(self, X: Any, y: Any = None, interactions: bool = False, check_additivity: bool = True, approximate: bool = False):
        """A ``shap.Explanation`` of ``X``: values, base values, the rows and feature names."""
        import time

        import shap

        start = time.time()
        if interactions:
            if approximate:
                raise NotImplementedError("Approximate computation not yet supported for interaction effects!")
            values = self.shap_interaction_values(X)
        else:
            values = self.shap_values(X, check_additivity=check_additivity, approximate=approximate)
        n = values.shape[0]
        base = np.asarray(self.expected_value, dtype=np.float64)
        base_values = np.full(n, float(base)) if base.ndim == 0 else np.tile(base, (n, 1))
        return shap.Explanation(
            values,
            base_values=base_values,
            data=_data_rows(X),
            feature_names=self.feature_names,
            compute_time=time.time() - start,
        )

    def assert_additivity(self, phi: Any, model_output: Any) -> None:
        """Raises shap's error when ``phi`` and the expected value do not add up to
        ``model_output`` (shap's tolerance: 1e-2 absolute and relative)."""
        phi = np.asarray(phi)
        expected = np.asarray(self.expected_value)
        total = phi.sum(axis=1) + expected
        if not np.allclose(total, np.asarray(model_output), atol=1e-2, rtol=1e-2):
            worst = float(np.abs(total - np.asarray(model_output)).max())
            raise ValueError(f"Additivity check failed in TreeExplainer! The SHAP values and the expected value differ from the model output by up to {worst:f}.")

    # -- shapfusion's side ---------------------------------------------------------------

    def _for_limit(self, limit: Optional[int]) -> Explainer:
        """The explainer of the model's first ``limit`` trees (all of them for ``None``), built
        once per limit."""
        if limit not in self._explainers:
            self._explainers[limit] = Explainer(
                self._source,
                threads=self._threads,
                background=self._background,
                transform=self._transform if self._background is not None else "identity",
                tree_limit=limit,
            )
        return self._explainers[limit]

    def _native_limit(self, tree_limit: Optional[int]) -> Optional[int]:
        """shap's ``tree_limit`` as a count of shapfusion's trees (``None``: the default)."""
        if tree_limit is None:
            return self._default_limit
        if tree_limit < 0:
            return None
        return _native_tree_count(self.model.original_model, tree_limit, self._num_trees, self._groups)

    def _transformed(self, margin: np.ndarray) -> np.ndarray:
        if self._transform == "logistic":
            return 1.0 / (1.0 + np.exp(-margin))
        return margin


class TreeEnsembleView:
    """What shap's ``explainer.model`` (its ``TreeEnsemble``) exposes, read from the model
    shapfusion loaded: ``trees`` (each with shap's node arrays: ``children_left``,
    ``children_right``, ``children_default``, ``features``, ``thresholds``, ``values``,
    ``node_sample_weight``), the same arrays stacked over trees, ``base_offset``,
    ``num_outputs``, ``tree_limit``, ``model_output``, ``original_model`` and ``predict``.

    Thresholds are the files' own: XGBoost's split ``x < t``, the others' ``x <= t``
    (``rules`` says which per node); categorical splits have NaN. An internal node's value is the
    cover-weighted mean of its leaves."""

    def __init__(self, model: Any, owner: TreeExplainer, explainer: Explainer) -> None:
        self.original_model = model
        self.model_output = owner.model_output
        self.model_type = _model_type(model)
        self._owner = owner
        self._explainer = explainer
        native = explainer._native
        self.base_offset = np.asarray(native.base_margin, dtype=np.float64)
        self.num_outputs = int(native.num_groups)
        self.objective = native.objective
        self.tree_output = _tree_output(model, native.objective)
        self.tree_limit = owner._default_limit if owner._default_limit is not None else owner._num_trees
        self.input_dtype = np.float64
        self.internal_dtype = np.float64
        self._trees = None

    @property
    def trees(self) -> list:
        """One ``SingleTreeView`` per tree, in the model file's order."""
        if self._trees is None:
            self._trees = [SingleTreeView(t, self.num_outputs) for t in self._explainer._native.trees()]
        return self._trees

    def _stacked(self, name: str, fill: float, dtype: Any) -> np.ndarray:
        width = max((len(t.children_left) for t in self.trees), default=0)
        shape = (len(self.trees), width) + ((self.num_outputs,) if name == "values" else ())
        out = np.full(shape, fill, dtype=dtype)
        for i, t in enumerate(self.trees):
            column = getattr(t, name)
            out[i, : len(column)] = column
        return out

    children_left = property(lambda self: self._stacked("children_left", -1, np.int32), doc="Left children, trees × nodes (-1: none).")
    children_right = property(lambda self: self._stacked("children_right", -1, np.int32), doc="Right children, trees × nodes (-1: none).")
    children_default = property(lambda self: self._stacked("children_default", -1, np.int32), doc="Missing-value children, trees × nodes.")
    features = property(lambda self: self._stacked("features", -1, np.int32), doc="Split features, trees × nodes (-2 at leaves).")
    thresholds = property(lambda self: self._stacked("thresholds", 0.0, np.float64), doc="Split thresholds, trees × nodes.")
    values = property(lambda self: self._stacked("values", 0.0, np.float64), doc="Node values, trees × nodes × outputs.")
    node_sample_weight = property(lambda self: self._stacked("node_sample_weight", 0.0, np.float64), doc="Covers, trees × nodes.")

    @property
    def num_nodes(self) -> np.ndarray:
        """Nodes per tree."""
        return np.array([len(t.children_left) for t in self.trees], dtype=np.int32)

    @property
    def max_depth(self) -> int:
        """The deepest tree's depth (edges from the root to its deepest leaf)."""
        return max((t.max_depth for t in self.trees), default=0)

    def predict(self, X: Any, y: Any = None, output: Optional[str] = None, tree_limit: Optional[int] = None) -> np.ndarray:
        """The model's output for ``X`` as shap's ``TreeEnsemble.predict`` gives it: the margin,
        or its transform for ``model_output="probability"``; ``(n,)`` for one output."""
        margin = self._owner._for_limit(self._owner._native_limit(tree_limit)).predict_margin(X)
        return margin if output == "raw" else self._owner._transformed(margin)

    def __repr__(self) -> str:
        return f"TreeEnsembleView({len(self.trees)} trees, {self.num_outputs} output(s), {self.model_type})"


class SingleTreeView:
    """One tree's node arrays as shap's ``SingleTree`` holds them."""

    def __init__(self, arrays: dict, num_outputs: int) -> None:
        self.children_left = arrays["children_left"]
        self.children_right = arrays["children_right"]
        self.children_default = arrays["children_default"]
        self.features = arrays["features"]
        self.thresholds = arrays["thresholds"]
        self.rules = arrays["rules"]
        self.node_sample_weight = arrays["node_sample_weight"]
        self.group = int(arrays["group"])
        # shap gives every tree a value per output; a tree adds to its own group only.
        self.values = np.zeros((len(self.children_left), num_outputs))
        self.values[:, self.group] = arrays["values"]
        self.max_depth = _depth(self.children_left, self.children_right)


# -- patching shap -----------------------------------------------------------------------------

#: shap's own classes while patched, to put back.
_ORIGINALS: dict = {}


def patch_shap() -> None:
    """Makes shap use shapfusion for tree models: ``shap.TreeExplainer``,
    ``shap.explainers.TreeExplainer``, ``shap.explainers.Tree`` and ``shap.Explainer(model)``'s
    tree choice all construct ``shapfusion.TreeExplainer``, so code written for shap runs on
    shapfusion's engines unchanged. Calling it twice is harmless; ``unpatch_shap()`` undoes it."""
    import shap
    from shap import explainers

    if _ORIGINALS:
        return
    original = explainers.TreeExplainer
    _ORIGINALS.update({"shap.TreeExplainer": shap.TreeExplainer, "explainers.TreeExplainer": original, "explainers.Tree": explainers.Tree})
    # shap.Explainer asks the tree explainer class which models it takes: shap's own answer.
    TreeExplainer.supports_model_with_masker = staticmethod(original.supports_model_with_masker)
    shap.TreeExplainer = TreeExplainer
    explainers.TreeExplainer = TreeExplainer
    explainers.Tree = TreeExplainer


def unpatch_shap() -> None:
    """Puts shap's own tree explainer back (undoes ``patch_shap()``)."""
    if not _ORIGINALS:
        return
    import shap
    from shap import explainers

    shap.TreeExplainer = _ORIGINALS["shap.TreeExplainer"]
    explainers.TreeExplainer = _ORIGINALS["explainers.TreeExplainer"]
    explainers.Tree = _ORIGINALS["explainers.Tree"]
    _ORIGINALS.clear()


# -- helpers -----------------------------------------------------------------------------------


def _shap_error(name: str, fallback: type) -> type:
    """shap's exception class ``name`` (so ``except`` clauses written for shap catch ours), or
    ``fallback`` where shap is not installed."""
    try:
        from shap.utils import _exceptions
    except ImportError:
        return fallback
    return getattr(_exceptions, name, fallback)


def _background_rows(data: Any) -> Any:
    """Rows of a background given as rows, a DataFrame or a shap masker (all its rows)."""
    if data is None:
        return None
    masker_data = getattr(data, "data", None)
    if type(data).__module__.startswith("shap.") and masker_data is not None:
        return masker_data
    return data


def _data_rows(X: Any) -> np.ndarray:
    """The rows an Explanation shows: the user's values (a DMatrix's as floats, a sparse
    matrix's densified, a DataFrame's as an array)."""
    rows = _plain_rows(X)
    if hasattr(rows, "toarray") and hasattr(rows, "nnz"):
        return rows.toarray()
    if hasattr(rows, "to_numpy") and not isinstance(rows, np.ndarray):
        return rows.to_numpy()
    if hasattr(rows, "__arrow_c_stream__") and not isinstance(rows, np.ndarray):
        import pyarrow as pa

        return pa.table(rows).to_pandas().to_numpy()
    return np.asarray(rows)


def _model_type(model: Any) -> str:
    """shap's ``model_type`` names: the library the model comes from (``internal`` for files)."""
    module = type(model).__module__ or ""
    for library in ("xgboost", "lightgbm", "catboost"):
        if module.startswith(library):
            return library
    if module.startswith("sklearn"):
        return "sklearn"
    return "internal"


def _tree_output(model: Any, objective: str) -> str:
    """What the trees add up to, in shap's words: ``log_odds``, ``probability`` (the class
    probabilities themselves), ``softmax`` (per-class scores of a multiclass model) or
    ``raw_value``."""
    if _trees_file.is_sklearn_estimator(model):
        from sklearn.base import is_classifier

        if not is_classifier(model):
            return "raw_value"
        name = type(model).__name__
        if name.startswith(("GradientBoosting", "HistGradientBoosting")):
            return "log_odds" if len(getattr(model, "classes_", ())) == 2 else "softmax"
        return "probability"
    words = objective.split()
    if words and words[0] in _LOG_ODDS_OBJECTIVES:
        return "log_odds"
    if words and words[0] in ("multi:softprob", "multi:softmax", "multiclass", "softmax", "MultiClass"):
        return "softmax"
    return "raw_value"


def _resolve_output(model: Any, model_output: str, objective: str, groups: int) -> Tuple[str, bool]:
    """(the transform the values attribute, whether a binary model's output is doubled to
    ``[1 - p, p]``) for shap's ``model_output``."""
    if model_output == "raw":
        return "identity", False
    if model_output not in ("probability", "predict_proba"):
        if model_output == "log_loss":
            raise NotImplementedError('shapfusion.TreeExplainer: model_output="log_loss" is not built yet')
        raise ValueError(f"Unrecognized model_output parameter value: {model_output!r}! Expected raw, probability or predict_proba.")
    kind = _tree_output(model, objective)
    if model_output == "predict_proba" and not hasattr(model, "predict_proba"):
        raise ValueError(f"model_output=\"predict_proba\": {type(model).__name__} has no predict_proba method")
    if kind == "probability":
        return "identity", False
    if kind == "log_odds" and groups == 1:
        sigmoid = [w for w in objective.split() if w.startswith("sigmoid:")]
        if sigmoid and float(sigmoid[0].split(":", 1)[1]) != 1.0:
            raise NotImplementedError(f"shapfusion.TreeExplainer: model_output={model_output!r} for LightGBM's {sigmoid[0]} (not the plain logistic) is not built yet")
        return "logistic", model_output == "predict_proba"
    if kind in ("log_odds", "softmax"):
        raise NotImplementedError(f"shapfusion.TreeExplainer: model_output={model_output!r} of a multiclass model (softmax of {groups} outputs) is not built yet")
    raise NotImplementedError(f'model_output = "probability" is not yet supported when model.tree_output = "{kind}"!')


def _xgboost_booster(model: Any) -> Any:
    return model.get_booster() if hasattr(model, "get_booster") else model


def _default_tree_limit(model: Any, num_trees: int) -> Optional[int]:
    """shap's default for XGBoost models: the trees up to the best iteration of early
    stopping (``None``: every tree)."""
    if _model_type(model) != "xgboost":
        return None
    booster = _xgboost_booster(model)
    try:
        best = int(booster.best_iteration)
    except (AttributeError, TypeError, ValueError):
        return None
    rounds = int(booster.num_boosted_rounds())
    if rounds <= 0 or best + 1 >= rounds:
        return None
    return (best + 1) * (num_trees // rounds)


def _native_tree_count(model: Any, tree_limit: int, num_trees: int, groups: int) -> Optional[int]:
    """How many of shapfusion's trees shap's ``tree_limit`` keeps."""
    kind = _model_type(model)
    if kind == "xgboost":
        rounds = max(int(_xgboost_booster(model).num_boosted_rounds()), 1)
        per_round = max(num_trees // rounds, 1)
        kept = (tree_limit // per_round) * per_round
    elif kind == "lightgbm":
        kept = tree_limit * groups
    elif kind == "catboost":
        raise NotImplementedError("tree_limit is not yet supported for CatBoost models!")
    elif kind == "sklearn":
        estimators = getattr(model, "estimators_", None)
        count = 1 if estimators is None else int(np.shape(estimators)[0])
        kept = tree_limit * max(num_trees // max(count, 1), 1)
    else:
        kept = tree_limit
    if kept <= 0:
        raise ValueError(f"tree_limit={tree_limit} keeps no tree of this model")
    return None if kept >= num_trees else kept


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    """Edges on the longest root-to-leaf path, without recursion."""
    if len(left) == 0:
        return 0
    depth, stack = 0, [(0, 0)]
    while stack:
        node, d = stack.pop()
        if node < 0 or node >= len(left):
            continue
        if left[node] < 0:
            depth = max(depth, d)
        else:
            stack.append((int(left[node]), d + 1))
            stack.append((int(right[node]), d + 1))
    return depth
