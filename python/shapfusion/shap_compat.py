"""``shapfusion.TreeExplainer``: shap's ``TreeExplainer`` interface over shapfusion's engines.

The constructor takes shap's arguments and resolves ``feature_perturbation`` as shap does;
``data`` may be rows, a DataFrame or a ``shap.maskers.Independent`` masker, and every row is
used (shap keeps a random 100 of a larger background). ``shap_values``,
``shap_interaction_values``, ``expected_value`` and ``explainer(X)`` (a ``shap.Explanation``)
have shap's layouts; ``explainer.model`` is a view of the trees with shap's node arrays and
``predict``. ``model_output`` is ``"raw"``, ``"probability"``, ``"predict_proba"`` or
``"log_loss"`` (all but the first interventional, as in shap). What is not built yet raises
``NotImplementedError`` naming it: probabilities and losses of multiclass (softmax) models.
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

import pickle
import warnings
from typing import IO, Any

import numpy as np

from . import Explainer, _model_source, _plain_rows, _trees_file, _xgboost_missing_value

__all__ = ["TreeExplainer", "patch_shap", "unpatch_shap"]

#: Objectives whose trees add up to log-odds of the positive class (shap's "log_odds" tree
#: output), as the model files name them: XGBoost, LightGBM (first word of its objective line)
#: and CatBoost.
_LOG_ODDS_OBJECTIVES = {"binary:logistic", "reg:logistic", "binary", "cross_entropy", "xentropy", "Logloss", "CrossEntropy"}


#: The transforms of ``model_output="log_loss"``: losses of each row's margin against its label.
_LOSSES = ("logistic_nlogloss", "squared_loss")

#: The constructor's ``approximate`` when not given (shap warns whenever it is).
_UNSET: Any = object()


class TreeExplainer:
    """Exact SHAP values of a tree model with shap's ``TreeExplainer`` interface.

    Parameters are shap's. ``data`` (rows, a DataFrame or a ``shap.maskers.Independent``
    masker) makes the values interventional over every background row; without it they are
    path-dependent (what the libraries' own ``pred_contribs`` compute). With
    ``feature_perturbation="tree_path_dependent"`` and ``data``, the values are path-dependent
    with every node's cover counted from ``data`` (as shap does: a node no row reaches gets
    1e-6). ``model_output``: ``"raw"`` (the margin), ``"probability"`` (log-odds models: the
    logistic of the margin, each background row's values rescaled as shap does; probability
    trees: their output), ``"predict_proba"`` (classifiers: one output per class, ``[1 - p,
    p]`` for binary log-odds models) or ``"log_loss"`` (the loss of each row's margin against
    its label ``y``, given to ``shap_values(X, y)``: the log loss of a binary log-odds model,
    the squared error of a squared-error regressor; ``expected_value`` is then a function of
    the label, as in shap); all need ``data``. ``threads`` (not shap's) bounds the compute
    threads; ``device`` (not shap's: ``"cpu"``, ``"gpu"`` or ``"auto"``, as in
    :class:`shapfusion.Explainer`) is where path-dependent values are computed.

    Columns are matched as shap and the libraries match them: a DataFrame that has every one of
    the model's feature names is matched by name (also with LightGBM's spaces-to-underscores
    renaming); otherwise by position, with a warning where the model's own names differ.
    """

    def __init__(
        self,
        model: Any,
        data: Any = None,
        model_output: str = "raw",
        feature_perturbation: str = "auto",
        feature_names: list[str] | None = None,
        approximate: Any = _UNSET,
        link: Any = None,
        linearize_link: Any = None,
        threads: int | None = None,
        device: str = "cpu",
    ) -> None:
        if approximate is not _UNSET:
            warnings.warn(
                "The approximate argument has been deprecated in version v0.47.0 and will be removed in version v0.48.0. "
                "Please use the approximate argument in the shap_values or the __call__ method instead.",
                DeprecationWarning,
                stacklevel=2,
            )
        self._approximate = bool(approximate) if approximate is not _UNSET else False
        if link is not None and getattr(link, "__name__", str(link)) not in ("identity", "IdentityLink"):
            raise NotImplementedError(f"shapfusion.TreeExplainer: link={link!r} is not built yet; the identity link is")
        background = _background_rows(data)
        if feature_perturbation == "auto":
            feature_perturbation = "interventional" if background is not None else "tree_path_dependent"
        elif feature_perturbation == "interventional" and background is None:
            warnings.warn(
                "In the future, passing feature_perturbation='interventional' without providing a background dataset "
                "will raise an error. Please provide a background dataset to continue using the interventional "
                "approach or set feature_perturbation='auto' to automatically switch approaches.",
                FutureWarning,
                stacklevel=2,
            )
            feature_perturbation = "tree_path_dependent"
        elif feature_perturbation not in ("interventional", "tree_path_dependent"):
            raise _shap_error("InvalidFeaturePerturbationError", ValueError)(
                f"feature_perturbation must be 'auto', 'interventional', or 'tree_path_dependent'. Got {feature_perturbation} instead."
            )
        if model_output != "raw" and feature_perturbation == "tree_path_dependent":
            raise ValueError('Only model_output="raw" is supported for feature_perturbation="tree_path_dependent"')
        self.model_output = model_output
        self.feature_perturbation = feature_perturbation
        # shap's Explainer attributes: the link (the identity: the values are in the units of
        # the output model_output names), whether it is linearized, the outputs' names (none).
        self.link = _identity_link()
        self.linearize_link = True if linearize_link is None else bool(linearize_link)
        self.output_names = None
        self._masker = data if type(data).__module__.startswith("shap.") else None
        self._threads = threads
        self._device = device
        # The model read once (a scikit-learn or CatBoost model is converted once), then its
        # objective and output count, from an explainer with no set-up, decide the transform.
        try:
            self._source = _model_source(model)
        except TypeError as e:
            raise _shap_error("InvalidModelError", TypeError)(
                f"Model type not yet supported by TreeExplainer: {type(model)} ({e})"
            ) from e
        self._missing = _xgboost_missing_value(model)
        info = Explainer._from_source(self._source, algorithm="treeshap", threads=threads, describe=True)
        self._model_names = list(info.feature_names)
        self._lightgbm = info.format.startswith("LightGBM")
        self._transform, self._doubled = _resolve_output(model, model_output, info.objective, info.num_groups)
        self._num_trees = info.num_trees
        self._groups = info.num_groups
        # shap's names for Explanations: the frame's columns, else these.
        self.data_feature_names = list(feature_names) if feature_names is not None else _column_names(background)
        self.feature_names = list(feature_names) if feature_names is not None else list(self._model_names)
        # The background in the model's columns; shap keeps it as a plain array.
        if background is not None:
            background, _ = self._aligned(background, "data")
        self.data = None if background is None else _data_rows(background)
        self.data_missing = None if self.data is None else _missing(self.data)
        self._background = background if feature_perturbation == "interventional" else None
        self._cover_rows = background if feature_perturbation == "tree_path_dependent" else None
        self._default_limit = _default_tree_limit(model, self._num_trees)
        self._explainers: dict[int | None, Explainer] = {}
        self._explainer = self._for_limit(self._default_limit)
        self._original_model = model
        self._model_type = _model_type(model)
        self._tree_output = _tree_output(model, info.objective)
        self._model_view: Any = None
        self._expected: float | np.ndarray | None = None
        self._background_margins: np.ndarray | None = None
        self._last_bias: Any = None

    # -- what shap exposes ---------------------------------------------------------------

    @property
    def model(self) -> Any:
        """The trees as shap's ``TreeEnsemble`` holds them (an instance of shap's class where
        shap is installed): node arrays in shap's conventions and ``predict``. Built on first
        use."""
        view = self.__dict__.get("_model_view")
        if view is None:
            if "_explainer" not in self.__dict__:
                # shap.Explainer(model) stores the model, turns itself into this class and then
                # calls __init__ with self.model: until then, the model it was given.
                return self.__dict__.get("model")
            view = self._model_view = _tree_ensemble_view(self._original_model, self, self._explainer)
        return view

    @model.setter
    def model(self, value: Any) -> None:
        self.__dict__["model"] = value

    @property
    def masker(self) -> Any:
        """The background as shap holds it: the masker given, else (where shap is installed)
        shap's ``Independent`` masker over every background row; ``None`` without one."""
        # shap.Explainer(model, data) sets its masker as a plain attribute, then turns itself
        # into this class and calls __init__ with self.masker: until then, that one.
        masker = self.__dict__.get("_masker", self.__dict__.get("masker"))
        data = self.__dict__.get("data")
        if masker is None and data is not None:
            try:
                import shap
            except ImportError:
                return None
            masker = self.__dict__["_masker"] = shap.maskers.Independent(data, max_samples=len(data))
        return masker

    @masker.setter
    def masker(self, value: Any) -> None:
        # shap.Explainer(model) sets it before turning itself into this class.
        self.__dict__["_masker"] = value

    @staticmethod
    def supports_model_with_masker(model: Any, masker: Any) -> bool:
        """Whether this explainer takes ``model`` with ``masker`` (what ``shap.Explainer`` asks
        its explainers): no masker or shap's ``Independent``, and a model shapfusion reads.
        (``patch_shap()`` answers as shap's own tree explainer does, so that
        ``shap.Explainer(model)`` picks the explainers shap would.)"""
        if masker is not None and type(masker).__name__ != "Independent":
            return False
        try:
            _model_source(model)
        except (TypeError, ValueError, OSError, NotImplementedError):
            return False
        return True

    def save(self, out_file: IO[bytes], model_saver: Any = ".save", masker_saver: Any = ".save") -> None:
        """Writes the explainer to the binary file ``out_file``, for :meth:`load` (shap's
        signature; the savers are not used: the explainer is pickled whole, its model's
        content and settings, as ``pickle.dumps`` keeps it). Only load files you trust."""
        pickle.dump(self, out_file)

    @classmethod
    def load(
        cls, in_file: IO[bytes], model_loader: Any = None, masker_loader: Any = None, instantiate: bool = True
    ) -> TreeExplainer:
        """Reads an explainer :meth:`save` wrote (shap's signature; pickle, so only files you
        trust)."""
        explainer = pickle.load(in_file)
        if not isinstance(explainer, cls):
            raise TypeError(
                f"{getattr(in_file, 'name', 'the file')} holds a {type(explainer).__name__}, not a shapfusion.TreeExplainer"
            )
        return explainer

    @property
    def expected_value(self) -> Any:
        """The mean output: over the background (interventional; of the probability for
        ``model_output="probability"``), or the cover-weighted mean of the trees
        (path-dependent; with ``data``, the covers are the data's). A float for one output, an
        array for several. For ``model_output="log_loss"``, as in shap, a function of the label
        ``y``: the background's mean loss against ``y`` (an array for an array of labels)."""
        if self._loss:
            return self._expected_loss
        if self._expected is None:
            zeros = np.zeros((1, len(self._model_names)))
            bias = self._explainer.shap_values(zeros)[..., -1].reshape(-1)
            if self._doubled:
                bias = np.array([1.0 - bias[0], bias[0]])
            self._expected = float(bias[0]) if bias.size == 1 else bias
        return self._expected

    def shap_values(
        self,
        X: Any,
        y: Any = None,
        tree_limit: int | None = None,
        approximate: bool = False,
        check_additivity: bool = True,
        from_call: bool = False,
    ) -> np.ndarray:
        """SHAP values in shap's layout: ``(n, F)`` for one output, ``(n, F, G)`` for several;
        one row given flat (a 1-D array, list or pandas Series) gives ``(F,)`` or ``(F, G)``.

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
            raise NotImplementedError(
                f"shapfusion.TreeExplainer: approximate=True with model_output={self.model_output!r} is not built yet; Saabas values attribute the margin"
            )
        rows, flat = self._aligned(X, "X")
        explainer = self._for_limit(self._native_limit(tree_limit))
        labels = self._labels(y, _row_count(rows))
        phi = explainer.saabas_values(rows) if approximate else explainer.shap_values(rows, labels=labels)
        if from_call:
            self._last_bias = phi[..., -1]
        if check_additivity:
            margin = explainer.predict_margin(rows)
            output = self._transformed(margin, None if labels is None else labels.reshape(margin.shape))
            total = phi.sum(axis=-1)
            scale = max(float(np.abs(phi).max()) if phi.size else 0.0, 1.0)
            if phi.size and np.abs(total - output).max() > 1e-6 * scale:
                worst = int(np.argmax(np.abs(total - output).reshape(len(total), -1).max(axis=-1)))
                raise _additivity_error(
                    f"Additivity check failed in TreeExplainer! For row {worst} the SHAP values and the expected value add up to "
                    f"{np.ravel(total[worst])} while the model's output is {np.ravel(output[worst])}."
                )
        values = phi[..., :-1]
        if self._doubled:
            values = np.stack([-values, values], axis=-1)
        elif self._groups > 1:
            values = np.ascontiguousarray(values.transpose(0, 2, 1))
        return values[0] if flat else values

    def shap_interaction_values(self, X: Any, y: Any = None, tree_limit: int | None = None) -> np.ndarray:
        """Interaction values in shap's layout: ``(n, F, F)`` for one output, ``(n, F, F, G)``
        for several (the bias row and column of XGBoost's layout left out); one row given flat
        gives ``(F, F)`` or ``(F, F, G)``. With ``data`` (interventional), the Shapley
        interaction index of the background game, which shap itself does not compute: rows sum
        to the interventional SHAP values."""
        if self.model_output != "raw":
            raise ValueError('Only model_output = "raw" is supported for SHAP interaction values right now!')
        rows, flat = self._aligned(X, "X")
        inter = self._for_limit(self._native_limit(tree_limit)).interactions(rows)[..., :-1, :-1]
        if self._groups > 1:
            inter = np.ascontiguousarray(inter.transpose(0, 2, 3, 1))
        return inter[0] if flat else inter

    def __call__(
        self, X: Any, y: Any = None, interactions: bool = False, check_additivity: bool = True, approximate: bool = False
    ) -> Any:
        """A ``shap.Explanation`` of ``X``: values, base values, the rows and feature names
        (the frame's columns, else the names given or the background frame's, else the
        model's). One row given flat gives the row's values without the row axis."""
        import time

        import shap

        start = time.time()
        if interactions:
            if approximate:
                raise NotImplementedError("Approximate computation not yet supported for interaction effects!")
            values = self.shap_interaction_values(X)
        else:
            values = self.shap_values(X, y, check_additivity=check_additivity, approximate=approximate, from_call=True)
        # shap's base values: the expected value once per entry of the values' first axis
        # (for one row given flat, as many as its features: code written for shap reads
        # base_values[0]). For a loss, each row's own: the mean loss against its label (shap
        # tiles its expected_value function there instead).
        if self._loss:
            base_values = np.asarray(self._last_bias, dtype=np.float64).reshape(-1)
            if base_values.size == 1 and values.ndim == 1:
                base_values = np.full(values.shape[0], base_values[0])
        else:
            base = np.asarray(self.expected_value, dtype=np.float64)
            base_values = np.tile(base, (values.shape[0], 1)) if base.ndim == 1 else np.full(values.shape[0], float(base))
        rows, flat = _flat_row(X)
        data = _data_rows(rows)[0] if flat else _data_rows(rows)
        return shap.Explanation(
            values,
            base_values=base_values,
            data=data,
            feature_names=self._explanation_names(X),
            compute_time=time.time() - start,
        )

    def assert_additivity(self, phi: Any, model_output: Any) -> None:
        """Raises shap's error when ``phi`` and the expected value do not add up to
        ``model_output`` (shap's tolerance: 1e-2 absolute and relative). ``phi`` is one
        output's ``(n, F)`` values, several outputs' ``(n, F, G)``, or a list of ``(n, F)``
        arrays, one per output (shap's list layout); ``model_output`` is ``(n,)`` or ``(n,
        G)``."""
        expected = np.asarray(self.expected_value, dtype=np.float64)
        outputs = np.asarray(model_output, dtype=np.float64)
        if isinstance(phi, (list, tuple)):
            totals = np.stack([np.asarray(p, dtype=np.float64).sum(axis=-1) for p in phi], axis=-1) + expected
        else:
            phi = np.asarray(phi, dtype=np.float64)
            totals = (phi.sum(axis=1) if phi.ndim == 3 else phi.sum(axis=-1)) + expected
        if totals.shape != outputs.shape:
            raise ValueError(
                f"assert_additivity: the SHAP values add up to shape {totals.shape}, the model output has shape {outputs.shape}"
            )
        if not np.allclose(totals, outputs, atol=1e-2, rtol=1e-2):
            diff = np.abs(totals - outputs)
            worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
            raise _additivity_error(
                "Additivity check failed in TreeExplainer! This check failed because for one of the samples the sum of the SHAP "
                f"values was {totals[worst]:f}, while the model output was {outputs[worst]:f}. If this difference is acceptable "
                "you can set check_additivity=False to disable this check."
            )

    def __getstate__(self) -> dict[str, Any]:
        """What pickling keeps (an explainer is shipped to Spark executors this way): the
        explainers (the model as read and their settings) and the facts read off the model;
        not a ``pyspark.ml`` model object, which lives in its JVM and does not pickle."""
        state = dict(self.__dict__)
        state["_model_view"] = None
        if (type(state.get("_original_model")).__module__ or "").startswith("pyspark"):
            state["_original_model"] = None
        return state

    # -- shapfusion's side ---------------------------------------------------------------

    def _for_limit(self, limit: int | None) -> Explainer:
        """The explainer of the model's first ``limit`` trees (all of them for ``None``), built
        once per limit."""
        if limit not in self._explainers:
            self._explainers[limit] = Explainer._from_source(
                self._source,
                missing=self._missing,
                threads=self._threads,
                background=self._background,
                transform=self._transform if self._background is not None else "identity",
                tree_limit=limit,
                cover_rows=self._cover_rows,
                device=self._device,
            )
        return self._explainers[limit]

    def _native_limit(self, tree_limit: int | None) -> int | None:
        """shap's ``tree_limit`` as a count of shapfusion's trees (``None``: the default)."""
        if tree_limit is None:
            return self._default_limit
        if tree_limit < 0:
            return None
        return _native_tree_count(self._original_model, tree_limit, self._num_trees, self._groups)

    @property
    def _loss(self) -> bool:
        return self._transform in _LOSSES

    def _expected_loss(self, y: Any) -> Any:
        """The background's mean loss against the label ``y`` (shap's ``expected_value(y)``)."""
        if self._background_margins is None:
            self._background_margins = self._explainer.predict_margin(self._background).reshape(-1)
        labels = np.asarray(y, dtype=np.float64)
        losses = self._transformed(self._background_margins[:, None], labels.reshape(1, -1)).mean(axis=0)
        return float(losses[0]) if labels.ndim == 0 else losses.reshape(labels.shape)

    def _transformed(self, margin: np.ndarray, y: Any = None) -> np.ndarray:
        """The output explained, of margins ``margin`` (and, for a loss, labels ``y``)."""
        if self._transform == "logistic":
            return np.asarray(1.0 / (1.0 + np.exp(-margin)))
        if self._transform == "logistic_nlogloss":
            # ln(1 + e^m) without overflow, as the engine computes it.
            return np.asarray(np.logaddexp(0.0, margin) - y * margin)
        if self._transform == "squared_loss":
            return np.asarray((margin - y) ** 2)
        return margin

    def _labels(self, y: Any, rows: int) -> np.ndarray | None:
        """The labels of ``rows`` rows for a loss (shap's errors where they are missing or
        miscounted); ``None`` for the other outputs, which read no labels."""
        if not self._loss:
            return None
        if y is None:
            raise _shap_error("ExplainerError", ValueError)(
                'Both samples and labels must be provided when model_output = "log_loss" (i.e. `explainer.shap_values(X, y)`)!'
            )
        labels = np.asarray(y, dtype=np.float64).reshape(-1)
        if len(labels) != rows:
            raise _shap_error("DimensionError", ValueError)(
                f"The number of labels ({len(labels)}) does not match the number of samples to explain ({rows})!"
            )
        return labels

    def _aligned(self, X: Any, what: str) -> tuple[Any, bool]:
        """(rows whose columns carry the model's feature names where they are matched by
        position, whether ``X`` was one row given flat)."""
        X, flat = _flat_row(X)
        X = _plain_rows(X)
        names = _column_names(X)
        if names is None:
            return X, flat
        renamed = _match_columns(names, self._model_names, self._lightgbm, what)
        return (X if renamed is None else _renamed(X, renamed)), flat

    def _explanation_names(self, X: Any) -> list[str]:
        names = _column_names(_plain_rows(_flat_row(X)[0]))
        if names is not None:
            return names
        return list(self.data_feature_names) if self.data_feature_names is not None else list(self.feature_names)


class _TreeEnsembleFields:
    """What shap's ``explainer.model`` (its ``TreeEnsemble``) exposes, read from the model
    shapfusion loaded, in shap's conventions: ``trees`` (each a tree's node arrays), the same
    arrays stacked over trees (``children_left``, ``children_right``, ``children_default``,
    ``features``, ``thresholds``, ``threshold_types``, ``values`` (trees × nodes × outputs),
    ``node_sample_weight``), ``base_offset``, ``num_outputs``, ``tree_limit``,
    ``model_output``, ``model_type``, ``objective``, ``tree_output``, ``original_model`` and
    ``predict``.

    shap's conventions: a row goes left at a numeric split iff ``x <= threshold`` (XGBoost's
    ``x < t`` on float32 becomes the next float32 below ``t``, as shap reads it); a tree's values
    are its contribution to the margin (a forest's leaves divided by its size, a boosted
    model's times the learning rate); an internal node's value is the cover-weighted mean of its
    leaves; each tree has a value per output, zero outside its own. Categorical splits have
    ``threshold_types`` 1 and a NaN threshold (the category set is the model's; shap's own
    arrays cannot hold it). ``rules`` (shapfusion's) says per node which rule the file has: 0
    leaf, 1 ``x < t``, 2 ``x <= t``, 3 categorical."""

    def __init__(self, model: Any, owner: TreeExplainer, explainer: Explainer) -> None:
        self.original_model = model
        self.model_output = owner.model_output
        self.model_type = owner._model_type
        self._owner = owner
        self._explainer = explainer
        self.base_offset = np.asarray(explainer.base_margin, dtype=np.float64)
        self._num_outputs = int(explainer.num_groups)
        self.tree_output = owner._tree_output
        words = explainer.objective.split()
        self.objective = _SHAP_OBJECTIVES.get(words[0] if words else "", None)
        self.tree_limit = owner._default_limit if owner._default_limit is not None else owner._num_trees
        self.input_dtype = np.float64
        self.internal_dtype = np.float64
        self.data = owner.data
        self.data_missing = owner.data_missing
        self.fully_defined_weighting = True
        self.num_stacked_models = self._num_outputs
        self.cat_feature_indices = None
        self.trees = [_single_tree(t, self._num_outputs) for t in explainer.tree_arrays()]
        width = max((len(t.children_left) for t in self.trees), default=0)
        for name, fill, dtype in _STACKED:
            shape = (len(self.trees), width) + ((self._num_outputs,) if name == "values" else ())
            out = np.full(shape, fill, dtype=dtype)
            for i, t in enumerate(self.trees):
                column = getattr(t, name)
                out[i, : len(column)] = column
            setattr(self, name, out)
        self.num_nodes = np.array([len(t.children_left) for t in self.trees], dtype=np.int32)
        self.max_depth = max((t.max_depth for t in self.trees), default=0)

    @property
    def num_outputs(self) -> int:
        """Outputs: classes of a multiclass model, targets of a multi-output one, else 1."""
        return self._num_outputs

    def predict(self, X: Any, y: Any = None, output: str | None = None, tree_limit: int | None = None) -> np.ndarray:
        """The model's output for ``X`` as shap's ``TreeEnsemble.predict`` gives it: the margin,
        or its transform for ``model_output="probability"``, or the loss against the labels
        ``y`` for ``model_output="log_loss"``; ``(n,)`` for one output, ``(n, G)`` for
        several; one row given flat gives ``()`` or ``(G,)``."""
        rows, flat = self._owner._aligned(X, "X")
        margin = self._owner._for_limit(self._owner._native_limit(tree_limit)).predict_margin(rows)
        if output == "raw":
            out = margin
        elif self._owner._loss:
            # shap reads no labels as zeros here.
            labels = np.zeros(margin.shape) if y is None else np.asarray(y, dtype=np.float64).reshape(margin.shape)
            out = self._owner._transformed(margin, labels)
        else:
            out = self._owner._transformed(margin)
        return out[0] if flat else out

    def get_transform(self) -> str:
        """What the explained output is of the margin, in shap's names: ``identity``,
        ``logistic``, ``logistic_nlogloss`` or ``squared_loss``."""
        return self._owner._transform

    def __repr__(self) -> str:
        return f"shapfusion TreeEnsemble view ({len(self.trees)} trees, {self.num_outputs} output(s), {self.model_type})"


#: The per-tree arrays stacked over trees: (name, fill for missing nodes, dtype).
_STACKED = (
    ("children_left", -1, np.int32),
    ("children_right", -1, np.int32),
    ("children_default", -1, np.int32),
    ("features", -1, np.int32),
    ("thresholds", 0.0, np.float64),
    ("threshold_types", 0, np.int32),
    ("values", 0.0, np.float64),
    ("node_sample_weight", 0.0, np.float64),
)

#: shap's names of the objectives (what it explains for ``model_output="log_loss"``).
_SHAP_OBJECTIVES = {
    "reg:squarederror": "squared_error",
    "reg:linear": "squared_error",
    "regression": "squared_error",
    "regression_l2": "squared_error",
    "RMSE": "squared_error",
    "squared_error": "squared_error",
    "binary:logistic": "binary_crossentropy",
    "reg:logistic": "binary_crossentropy",
    "binary": "binary_crossentropy",
    "Logloss": "binary_crossentropy",
}


class _SingleTreeFields:
    """One tree's node arrays as shap's ``SingleTree`` holds them (see
    ``_TreeEnsembleFields`` for the conventions)."""

    def __init__(self, arrays: dict[str, Any], num_outputs: int) -> None:
        self.children_left = arrays["children_left"].astype(np.int32)
        self.children_right = arrays["children_right"].astype(np.int32)
        self.children_default = arrays["children_default"].astype(np.int32)
        self.features = arrays["features"].astype(np.int32)
        self.rules = arrays["rules"]
        self.thresholds = _shap_thresholds(arrays["thresholds"], self.rules)
        self.threshold_types = (self.rules == 3).astype(np.int32)
        self.node_sample_weight = arrays["node_sample_weight"]
        self.group = int(arrays["group"])
        # shap gives every tree a value per output; a tree adds to its own group only.
        self.values = np.zeros((len(self.children_left), num_outputs))
        self.values[:, self.group] = arrays["values"]
        self.max_depth = _depth(self.children_left, self.children_right)


def _shap_thresholds(thresholds: np.ndarray, rules: np.ndarray) -> np.ndarray:
    """Thresholds for shap's ``x <= t``: XGBoost's ``x < t`` on float32 is ``x <= `` the next
    float32 below ``t`` (what shap reads from XGBoost models); leaves hold 0 (shap's filler)."""
    out = np.asarray(thresholds, dtype=np.float64).copy()
    less = rules == 1
    out[less] = np.nextafter(out[less].astype(np.float32), np.float32(-np.inf)).astype(np.float64)
    out[rules == 0] = 0.0
    return np.asarray(out)


#: The view classes, built once: subclasses of shap's own where shap is installed, so
#: ``isinstance(explainer.model, shap.explainers._tree.TreeEnsemble)`` holds.
_VIEW_CLASSES: dict[str, type] = {}


def _view_classes() -> tuple[type, type]:
    if not _VIEW_CLASSES:
        try:
            from shap.explainers._tree import SingleTree, TreeEnsemble
        except ImportError:
            ensemble: tuple[type, ...] = (_TreeEnsembleFields,)
            single: tuple[type, ...] = (_SingleTreeFields,)
        else:
            ensemble, single = (_TreeEnsembleFields, TreeEnsemble), (_SingleTreeFields, SingleTree)
        # Our fields come first in the order of lookup; shap's __init__ is never called (its
        # arrays come from shapfusion's model, not from shap's readers).
        _VIEW_CLASSES["ensemble"] = type(
            "TreeEnsembleView", ensemble, {"__module__": __name__, "__doc__": _TreeEnsembleFields.__doc__}
        )
        _VIEW_CLASSES["single"] = type("SingleTreeView", single, {"__module__": __name__, "__doc__": _SingleTreeFields.__doc__})
    return _VIEW_CLASSES["ensemble"], _VIEW_CLASSES["single"]


def _tree_ensemble_view(model: Any, owner: TreeExplainer, explainer: Explainer) -> Any:
    cls: Any = _view_classes()[0]
    view = cls.__new__(cls)
    _TreeEnsembleFields.__init__(view, model, owner, explainer)
    return view


def _single_tree(arrays: dict[str, Any], num_outputs: int) -> Any:
    cls: Any = _view_classes()[1]
    tree = cls.__new__(cls)
    _SingleTreeFields.__init__(tree, arrays, num_outputs)
    return tree


# -- patching shap -----------------------------------------------------------------------------

#: shap's own classes while patched, to put back.
_ORIGINALS: dict[str, Any] = {}


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
    _ORIGINALS.update(
        {
            "shap.TreeExplainer": shap.TreeExplainer,
            "explainers.TreeExplainer": original,
            "explainers.Tree": explainers.Tree,
            "supports_model_with_masker": TreeExplainer.__dict__["supports_model_with_masker"],
        }
    )
    # shap.Explainer asks the tree explainer class which models it takes: shap's own answer.
    TreeExplainer.supports_model_with_masker = staticmethod(original.supports_model_with_masker)  # type: ignore[method-assign]
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
    TreeExplainer.supports_model_with_masker = _ORIGINALS["supports_model_with_masker"]  # type: ignore[method-assign]
    _ORIGINALS.clear()


# -- helpers -----------------------------------------------------------------------------------


def _identity_link() -> Any:
    """shap's identity link where shap is installed, else a function that is the identity."""
    try:
        from shap import links
    except ImportError:
        return lambda x: x
    return links.identity


def _shap_error(name: str, fallback: type) -> type:
    """shap's exception class ``name`` (so ``except`` clauses written for shap catch ours), or
    ``fallback`` where shap is not installed."""
    try:
        from shap.utils import _exceptions
    except ImportError:
        return fallback
    return getattr(_exceptions, name, fallback)


def _additivity_error(message: str) -> Exception:
    """shap's ``ExplainerError`` for a failed additivity check, also a ``ValueError`` (what
    shapfusion raises for bad values, and all it raises where shap is not installed)."""
    shap_class = _shap_error("ExplainerError", ValueError)
    if issubclass(shap_class, ValueError):
        error: Exception = shap_class(message)
        return error
    if "additivity" not in _ERROR_CLASSES:
        _ERROR_CLASSES["additivity"] = type("AdditivityError", (shap_class, ValueError), {"__module__": __name__})
    return _ERROR_CLASSES["additivity"](message)


_ERROR_CLASSES: dict[str, type[Exception]] = {}


def _background_rows(data: Any) -> Any:
    """Rows of a background given as rows, a DataFrame or a shap masker (all its rows)."""
    if data is None:
        return None
    masker_data = getattr(data, "data", None)
    if type(data).__module__.startswith("shap.") and masker_data is not None:
        return masker_data
    return data


def _flat_row(X: Any) -> tuple[Any, bool]:
    """(``X`` as rows, whether it was one row given flat): a 1-D array or list, or a pandas
    Series (its index names the features), becomes one row, as shap takes it."""
    module = type(X).__module__ or ""
    if module.startswith("pandas") and type(X).__name__ == "Series":
        return X.to_frame().T.infer_objects(), True
    if isinstance(X, (list, tuple)) or (isinstance(X, np.ndarray) and X.ndim == 1):
        array = np.asarray(X)
        if array.ndim == 1:
            return array.reshape(1, -1), True
        return array, False
    return X, False


def _column_names(X: Any) -> list[str] | None:
    """The column names of a pandas, polars or pyarrow table (None for anything else)."""
    if X is None:
        return None
    module = type(X).__module__ or ""
    if module.startswith("pandas") and hasattr(X, "columns"):
        return [str(c) for c in X.columns]
    if module.startswith("polars") and hasattr(X, "columns"):
        return list(X.columns)
    if module.startswith("pyarrow") and hasattr(X, "schema"):
        return list(X.schema.names)
    return None


def _renamed(X: Any, names: list[str]) -> Any:
    """``X`` with its columns named ``names``, in order."""
    module = type(X).__module__ or ""
    if module.startswith("pandas"):
        return X.set_axis(names, axis=1)
    if module.startswith("polars"):
        return X.rename(dict(zip(X.columns, names)))
    return X.rename_columns(names)


def _is_default_name(name: str, j: int) -> bool:
    """Whether ``name`` is what a library calls column ``j`` of unnamed training data."""
    return name in (f"f{j}", f"Column_{j}", str(j))


def _match_columns(columns: list[str], model_names: list[str], lightgbm: bool, what: str) -> list[str] | None:
    """How a table's ``columns`` meet the model's features, as shap and the libraries match
    them: ``None`` when every feature is a column (matched by name, in any order); else the
    names to give the columns so that they match. LightGBM stores a name with its spaces as
    underscores (``Marital Status`` → ``Marital_Status``), so its models also match that way;
    otherwise the columns are taken by position (what shap and the libraries' ``predict`` do),
    with a warning where the model has names of its own that differ."""
    wanted = set(model_names)
    if wanted.issubset(columns):
        return None
    if lightgbm:
        underscored = [c.replace(" ", "_") for c in columns]
        if wanted.issubset(underscored) and len(set(underscored)) == len(underscored):
            return underscored
    if len(columns) != len(model_names):
        missing = [n for n in model_names if n not in set(columns)]
        shown = ", ".join(repr(n) for n in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(
            f"{what} has {len(columns)} columns and lacks the model's features {shown}; the model has {len(model_names)} "
            "features, and columns are matched by position only when the counts agree"
        )
    if not all(_is_default_name(n, j) for j, n in enumerate(model_names)):
        differ = [(c, n) for c, n in zip(columns, model_names) if c != n]
        shown = ", ".join(f"{c!r} as {n!r}" for c, n in differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        warnings.warn(
            f"{what}'s column names are not the model's feature names; its columns are taken by position, as shap and the "
            f"model's own predict take them: {shown}",
            UserWarning,
            stacklevel=4,
        )
    return list(model_names)


def _missing(rows: np.ndarray) -> np.ndarray:
    """Where ``rows`` holds missing values (shap's ``data_missing``)."""
    try:
        return np.isnan(rows.astype(np.float64))
    except (TypeError, ValueError):
        import pandas as pd

        return np.asarray(pd.isna(rows))


def _data_rows(X: Any) -> np.ndarray:
    """The rows an Explanation shows: the user's values (a DMatrix's as floats, a sparse
    matrix's densified, a DataFrame's as an array)."""
    rows = _plain_rows(X)
    if hasattr(rows, "toarray") and hasattr(rows, "nnz"):
        return np.asarray(rows.toarray())
    if hasattr(rows, "to_numpy") and not isinstance(rows, np.ndarray):
        return np.asarray(rows.to_numpy())
    if hasattr(rows, "__arrow_c_stream__") and not isinstance(rows, np.ndarray):
        import pyarrow as pa

        return np.asarray(pa.table(rows).to_pandas().to_numpy())
    return np.asarray(rows)


def _model_type(model: Any) -> str:
    """shap's ``model_type`` names: the library the model comes from (``internal`` for files)."""
    module = type(model).__module__ or ""
    for library in ("xgboost", "lightgbm", "catboost", "pyspark"):
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


def _resolve_output(model: Any, model_output: str, objective: str, groups: int) -> tuple[str, bool]:
    """(the transform the values attribute, whether a binary model's output is doubled to
    ``[1 - p, p]``) for shap's ``model_output``."""
    if model_output == "raw":
        return "identity", False
    if model_output == "log_loss":
        return _loss_transform(model, objective, groups), False
    if model_output not in ("probability", "predict_proba"):
        raise ValueError(
            f"Unrecognized model_output parameter value: {model_output!r}! Expected raw, probability or predict_proba."
        )
    kind = _tree_output(model, objective)
    if model_output == "predict_proba" and not hasattr(model, "predict_proba"):
        raise ValueError(f'model_output="predict_proba": {type(model).__name__} has no predict_proba method')
    if kind == "probability":
        return "identity", False
    if kind == "log_odds" and groups == 1:
        sigmoid = [w for w in objective.split() if w.startswith("sigmoid:")]
        if sigmoid and float(sigmoid[0].split(":", 1)[1]) != 1.0:
            raise NotImplementedError(
                f"shapfusion.TreeExplainer: model_output={model_output!r} for LightGBM's {sigmoid[0]} (not the plain logistic) is not built yet"
            )
        return "logistic", model_output == "predict_proba"
    if kind in ("log_odds", "softmax"):
        raise NotImplementedError(
            f"shapfusion.TreeExplainer: model_output={model_output!r} of a multiclass model (softmax of {groups} outputs) is not built yet"
        )
    raise NotImplementedError(f'model_output = "probability" is not yet supported when model.tree_output = "{kind}"!')


def _loss_transform(model: Any, objective: str, groups: int) -> str:
    """The loss ``model_output="log_loss"`` explains: the log loss of a binary log-odds model
    (``logistic_nlogloss``), the squared error of a regressor trained on it (``squared_loss``);
    shap's error for the others."""
    kind = _tree_output(model, objective)
    if groups == 1 and kind == "log_odds":
        sigmoid = [w for w in objective.split() if w.startswith("sigmoid:")]
        if not sigmoid or float(sigmoid[0].split(":", 1)[1]) == 1.0:
            return "logistic_nlogloss"
    if groups == 1 and kind == "raw_value" and _trained_on_squared_error(model, objective):
        return "squared_loss"
    raise NotImplementedError(f'model_output = "log_loss" is not yet supported when model.objective = "{objective}"!')


#: Objectives that train on the squared error, as the model files name them (XGBoost, LightGBM's
#: first word, CatBoost).
_SQUARED_ERROR_OBJECTIVES = {"reg:squarederror", "reg:linear", "regression", "regression_l2", "RMSE"}


def _trained_on_squared_error(model: Any, objective: str) -> bool:
    """Whether a regressor's trees were fitted to the squared error (a scikit-learn estimator's
    ``criterion`` or ``loss``; a model file's objective)."""
    if _trees_file.is_sklearn_estimator(model):
        loss = getattr(model, "loss", None)
        if isinstance(loss, str):
            return loss in ("squared_error", "ls")
        return getattr(model, "criterion", None) in ("squared_error", "mse", "friedman_mse")
    words = objective.split()
    return bool(words) and words[0] in _SQUARED_ERROR_OBJECTIVES


def _row_count(rows: Any) -> int:
    """Rows of ``rows`` (any form ``Explainer`` takes)."""
    shape = getattr(rows, "shape", None)
    if shape is not None:
        return int(shape[0])
    if hasattr(rows, "num_rows"):
        return int(rows.num_rows)
    return len(rows)


def _xgboost_booster(model: Any) -> Any:
    return model.get_booster() if hasattr(model, "get_booster") else model


def _default_tree_limit(model: Any, num_trees: int) -> int | None:
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


def _native_tree_count(model: Any, tree_limit: int, num_trees: int, groups: int) -> int | None:
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
