"""``shapfusion.TreeExplainer``: shap's ``TreeExplainer`` interface over shapfusion's engines.

Built so far (issue 32 is in progress): the constructor's arguments with shap's resolution of
``feature_perturbation``, ``data`` as rows or a ``shap.maskers.Independent`` masker (every row
is used; shap keeps a random 100 of a larger one), ``model_output="raw"``, ``expected_value``,
``shap_values`` and ``shap_interaction_values`` in shap's layouts, and ``explainer(X)``
returning a ``shap.Explanation``. What is not built yet raises ``NotImplementedError`` naming it:
``model_output`` other than ``"raw"``, ``approximate=True`` (Saabas values), ``tree_limit``.
``patch_shap()`` makes shap itself use it (``shap.TreeExplainer``, ``shap.explainers.Tree`` and
the tree choice of ``shap.Explainer``); ``unpatch_shap()`` undoes it.

Layouts, as shap gives them: one output (regressors, binary XGBoost/LightGBM/CatBoost models,
binary GradientBoosting, IsolationForest) gives ``(n, F)`` values and a float
``expected_value``; several (classes of a classifier, also binary scikit-learn forests and
trees, which explain both class probabilities; targets of a multi-output model) give
``(n, F, G)`` and a vector. ``expected_value`` is the model's own: for XGBoost multiclass models
it includes the per-class base score, which shap's misses.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np

from . import Explainer, _plain_rows

__all__ = ["TreeExplainer", "patch_shap", "unpatch_shap"]


class TreeExplainer:
    """Exact SHAP values of a tree model with shap's ``TreeExplainer`` interface.

    Parameters are shap's. ``data`` (rows, a DataFrame or a ``shap.maskers.Independent``
    masker) makes the values interventional over every background row; without it they are
    path-dependent (what the libraries' own ``pred_contribs`` compute).
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
        if model_output != "raw":
            raise NotImplementedError(f"shapfusion.TreeExplainer: model_output={model_output!r} is not built yet; \"raw\" is")
        if approximate:
            raise NotImplementedError("shapfusion.TreeExplainer: approximate=True (Saabas values) is not built yet")
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
            raise ValueError("Invalid feature_perturbation option! feature_perturbation must be one of auto, interventional or tree_path_dependent")
        self.model = model
        self.data = background
        self.model_output = model_output
        self.feature_perturbation = feature_perturbation
        use_background = background if feature_perturbation == "interventional" else None
        self._explainer = Explainer(model, threads=threads, background=use_background)
        self.feature_names = list(feature_names) if feature_names is not None else list(self._explainer.feature_names)
        self._groups = self._explainer.num_groups
        self._expected = None

    # -- what shap exposes ---------------------------------------------------------------

    @property
    def expected_value(self):
        """The mean margin: over the background (interventional), or the cover-weighted mean of
        the trees (path-dependent). A float for one output, an array for several."""
        if self._expected is None:
            zeros = np.zeros((1, len(self._explainer.feature_names)))
            bias = self._explainer.shap_values(zeros)[..., -1].reshape(-1)
            self._expected = float(bias[0]) if self._groups == 1 else bias
        return self._expected

    def shap_values(self, X: Any, y: Any = None, tree_limit: Optional[int] = None, approximate: bool = False, check_additivity: bool = True):
        """SHAP values in shap's layout: ``(n, F)`` for one output, ``(n, F, G)`` for several.

        ``check_additivity`` checks that each row's values and the expected value add up to the
        model's margin (shapfusion's own, which the tests check against each library's)."""
        self._refuse(tree_limit, approximate)
        phi = self._explainer.shap_values(X)
        if check_additivity:
            margin = self._explainer.predict_margin(X)
            total = phi.sum(axis=-1)
            scale = max(float(np.abs(phi).max()) if phi.size else 0.0, 1.0)
            if phi.size and np.abs(total - margin).max() > 1e-6 * scale:
                raise ValueError("Additivity check failed in TreeExplainer! The SHAP values and the expected value do not add up to the model's margin.")
        values = phi[..., :-1]
        if self._groups == 1:
            return values
        return np.ascontiguousarray(values.transpose(0, 2, 1))

    def shap_interaction_values(self, X: Any, y: Any = None, tree_limit: Optional[int] = None):
        """Interaction values in shap's layout: ``(n, F, F)`` for one output, ``(n, F, F, G)``
        for several (the bias row and column of XGBoost's layout left out)."""
        self._refuse(tree_limit, False)
        if self.feature_perturbation == "interventional":
            raise NotImplementedError("shapfusion.TreeExplainer: interaction values are path-dependent only (as in shap); build the explainer without data")
        inter = self._explainer.interactions(X)[..., :-1, :-1]
        if self._groups == 1:
            return inter
        return np.ascontiguousarray(inter.transpose(0, 2, 3, 1))

    def __call__(self, X: Any, y: Any = None, interactions: bool = False, check_additivity: bool = True):
        """A ``shap.Explanation`` of ``X``: values, base values, the rows and feature names."""
        import shap

        values = self.shap_interaction_values(X) if interactions else self.shap_values(X, check_additivity=check_additivity)
        n = values.shape[0]
        base = np.asarray(self.expected_value, dtype=np.float64)
        base_values = np.full(n, float(base)) if base.ndim == 0 else np.tile(base, (n, 1))
        rows = _plain_rows(X)  # a Series as one row, a DMatrix as its values
        data = rows.to_numpy() if hasattr(rows, "to_numpy") and not isinstance(rows, np.ndarray) else np.asarray(rows)
        return shap.Explanation(values, base_values=base_values, data=data, feature_names=self.feature_names)

    def _refuse(self, tree_limit: Optional[int], approximate: bool) -> None:
        if tree_limit is not None:
            raise NotImplementedError("shapfusion.TreeExplainer: tree_limit is not built yet")
        if approximate:
            raise NotImplementedError("shapfusion.TreeExplainer: approximate=True (Saabas values) is not built yet")


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


def _background_rows(data: Any) -> Any:
    """Rows of a background given as rows, a DataFrame or a shap masker (all its rows)."""
    if data is None:
        return None
    masker_data = getattr(data, "data", None)
    if type(data).__module__.startswith("shap.") and masker_data is not None:
        return masker_data
    return data
