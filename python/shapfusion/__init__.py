"""Exact SHAP values and SHAP interaction values for tree ensembles: XGBoost, LightGBM,
scikit-learn, CatBoost and Spark ML.

The numbers are the ones ``booster.predict(..., pred_contribs=True)`` (XGBoost) and
``booster.predict(..., pred_contrib=True)`` (LightGBM) give, in XGBoost's array layouts, computed
by shapfusion's engines on all cores with the GIL released::

    import shapfusion
    explainer = shapfusion.Explainer(booster)          # an xgboost/lightgbm Booster, a path or bytes
    phi = explainer.shap_values(X)                     # (n, F+1): one column per feature, bias last
    assert abs(phi.sum(axis=1) - explainer.predict_margin(X)).max() < 1e-6

``X`` is a NumPy array (columns in the model's order), a pandas or polars DataFrame, or a
pyarrow Table/RecordBatch (any object with the Arrow PyCapsule interface); named columns are
matched to the model's features by name, in any order. ``shapfusion.datafusion_udfs`` gives
``shap(...)`` and friends to Python's ``datafusion`` SQL engine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from . import _shapfusion, _trees_file
from ._shapfusion import __version__
from ._trees_file import save_model

if TYPE_CHECKING:
    import pyarrow

__all__ = ["Explainer", "TreeExplainer", "__version__", "datafusion_udfs", "patch_shap", "save_model", "unpatch_shap"]

#: What ``Explainer`` accepts as a model.
ModelLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]


class Explainer:
    """A model prepared for explaining: parsed once, engine built once, reused by every call.

    Parameters
    ----------
    model
        The tree ensemble: a path to a model file (XGBoost JSON/UBJSON, LightGBM text, CatBoost
        JSON or binary ``.cbm``, a shapfusion trees file from :func:`save_model`) or a Spark ML
        model directory, the bytes of such a file, an ``xgboost.Booster`` or ``XGBModel`` (read
        through its raw UBJSON), a ``lightgbm.Booster`` or ``LGBMModel`` (its model string), a fitted
        scikit-learn tree estimator (its node arrays, as :func:`save_model` writes them) or a
        ``catboost`` model (its JSON).
    algorithm
        The engine: ``"auto"`` (picked from the model's shape, what the CLI picks), ``"linear"``,
        ``"fast-v2"``, ``"fast-v1"``, ``"quadrature"``, ``"oblivious"`` (tables of CatBoost's
        symmetric trees) or ``"treeshap"``. All are exact; they differ in speed only.
    threads
        Compute threads; ``None`` uses all cores. Results do not depend on it.
    background
        Rows for interventional SHAP (what ``shap.TreeExplainer(model, data=background,
        feature_perturbation="interventional")`` computes, over every row given): features left
        out of a coalition take the background rows' values, and the bias is the background's
        mean margin. Same forms as ``X``. Without it, values are path-dependent, as XGBoost's
        and LightGBM's own.
    transform
        What interventional values attribute: ``"identity"`` (the margin), ``"logistic"``
        (the probability of a log-odds model, as ``shap.TreeExplainer(model, data,
        model_output="probability")`` computes it: each background row's margin values scaled
        to the change in probability; the bias is the background's mean probability), or a
        loss of the margin against each row's label, as ``model_output="log_loss"`` computes
        it: ``"logistic_nlogloss"`` (``ln(1 + e^m) - y m``, a log-odds model's log loss) or
        ``"squared_loss"`` (``(m - y)^2``); a loss's values need ``labels`` and each row's bias
        is the background's mean loss against the row's label. Needs ``background``; its cost
        per row grows with the background's size.
    tree_limit
        Explain the model's first ``tree_limit`` trees only, in the model file's order (for
        XGBoost and LightGBM, rounds times trees per round); ``None`` is all of them.
    cover_rows
        Rows (same forms as ``X``) to count the trees' covers from: path-dependent values whose
        expectations are over these rows instead of the training data, what
        ``shap.TreeExplainer(model, data, feature_perturbation="tree_path_dependent")``
        computes. The bias is then their mean margin (a node none of them reaches weighs 1e-6,
        as in shap). Not with ``background``.
    device
        Where the engine runs: ``"cpu"`` (the default: on the one GPU the wheel has met, its
        GPU path failed with a CUDA context error, see the README), ``"gpu"`` (an NVIDIA GPU,
        through CUDA loaded at run time: an error naming what is missing where there is none)
        or ``"auto"`` (SHAP values on the GPU when one is usable and ``algorithm`` is
        ``"auto"``, else the CPU; interaction values on the CPU). Path-dependent values only;
        the GPU engine computes in float64.
    index
        The attribution index: ``"shapley"`` (SHAP values, the default) or ``"banzhaf"``
        (Banzhaf values, as WOODELF computes them: every coalition of the other features
        weighted alike). Banzhaf values come in the same layouts; they do not add up to the
        prediction, so the bias column holds the prediction minus their sum. Their interaction
        values are the Banzhaf interaction index, whole off the diagonal (WOODELF's layout; shap
        halves the Shapley index there), each row's diagonal entry its Banzhaf value minus the
        row's other entries. With ``background``, interventional Banzhaf values and interactions
        (a ``transform`` other than the margin raises ``NotImplementedError``). On the CPU only.

    Raises
    ------
    FileNotFoundError
        ``model`` is a path that does not exist.
    ValueError
        The model file is not a valid model, or an option or the background is wrong.
    NotImplementedError
        The model needs what is not given (a LightGBM linear tree's values need a background), or
        ``device="gpu"`` where no GPU can be used (the message names what is missing: the CUDA
        driver library, NVRTC or a device) or with ``background``.
    TypeError
        ``model`` is none of the accepted kinds.

    Every error of the native code is raised by its kind, with the message the command line
    prints (each cause included): ``ValueError`` for a bad argument or bad data,
    ``FileNotFoundError``, ``OSError`` for another failed read or write, ``ConnectionError``
    for an unreachable object store or worker, ``MemoryError`` for a bound reached (rows too
    many for memory), ``NotImplementedError`` for a path not built, ``RuntimeError`` for a bug.

    Examples
    --------
    >>> explainer = shapfusion.Explainer("examples/models/fraud.json")   # doctest: +SKIP
    >>> explainer.shap_values(df).shape                                    # doctest: +SKIP
    (10000, 9)
    """

    def __init__(
        self,
        model: ModelLike,
        *,
        algorithm: str = "auto",
        threads: int | None = None,
        background: Any = None,
        transform: str = "identity",
        tree_limit: int | None = None,
        cover_rows: Any = None,
        device: str = "cpu",
        index: str = "shapley",
    ) -> None:
        # An XGBoost scikit-learn model built with missing=v reads v as missing, as its
        # predict does (a Booster has no such setting: its DMatrix had it).
        self._missing = _xgboost_missing_value(model)
        self._build(_model_source(model), algorithm, threads, background, transform, tree_limit, cover_rows, device, index)

    @classmethod
    def _from_source(cls, source: dict[str, Any], *, missing: float | None = None, **settings: Any) -> Explainer:
        """An explainer of a model already read by :func:`_model_source` (one read serves many
        explainers), or of a Spark ML model directory's files as ``shapfusion.spark`` ships them
        (``dict(spark_files=[(relative path, bytes), ...], name=...)``); ``settings`` are the
        constructor's."""
        self = cls.__new__(cls)
        self._missing = missing
        self._build(source, **settings)
        return self

    def _build(
        self,
        source: dict[str, Any],
        algorithm: str = "auto",
        threads: int | None = None,
        background: Any = None,
        transform: str = "identity",
        tree_limit: int | None = None,
        cover_rows: Any = None,
        device: str = "cpu",
        index: str = "shapley",
        describe: bool = False,
    ) -> None:
        """The native explainer of the model ``source`` names (``path``, ``data`` (the file's
        bytes) or ``spark_files``, and its ``name``). ``describe``: one for the model's names and
        output layout only, which builds also for a model explained only over a background
        (LightGBM linear trees)."""
        # What pickling keeps: the model as read and the settings; the engine is built anew.
        self._state = {
            "source": source,
            "algorithm": algorithm,
            "threads": threads,
            "background": background,
            "transform": transform,
            "tree_limit": tree_limit,
            "cover_rows": cover_rows,
            "device": device,
            "index": index,
            "describe": describe,
        }
        background_rows, background_names = (None, None) if background is None else _rows(self._missing_as_nan(background))
        cover_values, cover_names = (None, None) if cover_rows is None else _rows(self._missing_as_nan(cover_rows))
        self._native = _shapfusion.NativeExplainer(
            **source,
            algorithm=algorithm,
            threads=_threads(threads),
            background=background_rows,
            background_names=background_names,
            transform=transform,
            tree_limit=tree_limit,
            cover_rows=cover_values,
            cover_names=cover_names,
            device=device,
            index=index,
            describe=describe,
        )
        self._interventional = background is not None

    def __getstate__(self) -> dict[str, Any]:
        """The model as read and the settings (an explainer pickles, to ship to other
        processes, as shap's does); the engine is rebuilt on unpickling."""
        state = dict(self._state, missing=self._missing)
        source = state["source"]
        if "path" in source:
            # The model's content, not its path: the other process may not see this file system.
            path, name = source["path"], source["name"]
            if os.path.isdir(path):
                state["source"] = {"spark_files": _directory_files(path), "name": name}
            else:
                with open(path, "rb") as f:
                    state["source"] = {"data": f.read(), "name": name}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._missing = state.pop("missing")
        source = state.pop("source")
        self._build(source, **state)

    # -- results ---------------------------------------------------------------------------

    def shap_values(self, X: Any, *, labels: Any = None, as_arrow: bool = False) -> np.ndarray | pyarrow.RecordBatch:
        """SHAP values of every row of ``X``.

        Returns a float64 array in XGBoost's ``pred_contribs`` layout: ``(n, F+1)`` for a model
        with one output, ``(n, G, F+1)`` for G outputs (classes, targets); the last entry of
        each row (and group) is the bias, and each row sums to the margin. LightGBM's
        ``pred_contrib`` gives the same values as ``(n, G*(F+1))``.

        With ``as_arrow=True``, a ``pyarrow.RecordBatch`` with the columns ``shapfusion explain``
        writes: one float64 column per feature then ``bias`` (lists of G values for G outputs).

        ``labels`` (one number per row) are the rows' labels, for an explainer of a loss
        ``transform``; each row then sums to its loss against its label.

        Raises ``ValueError`` when ``X`` lacks a feature (the message names it and lists the
        columns ``X`` has) or has a column of the wrong type, or when ``labels`` are given to an
        explainer of no loss (or not given to one of a loss).
        """
        if labels is not None:
            if as_arrow:
                raise NotImplementedError("shap_values(labels=...): a loss's values come as a NumPy array only (as_arrow=False)")
            labels = np.ascontiguousarray(np.asarray(labels, dtype=np.float64).reshape(-1))
        return self._compute(X, "shap", as_arrow, labels)

    def interactions(self, X: Any, *, as_arrow: bool = False) -> np.ndarray | pyarrow.RecordBatch:
        """SHAP interaction values of every row of ``X``.

        Returns XGBoost's ``pred_interactions`` layout: ``(n, F+1, F+1)``, or ``(n, G, F+1,
        F+1)`` for G outputs. Entry ``[i, j]`` is the interaction of features i and j (split
        evenly between ``[i, j]`` and ``[j, i]``), the diagonal holds the main effects, and the
        last row and column the bias. Each row's entries sum to its SHAP values along one axis.

        With ``as_arrow=True``, a ``pyarrow.RecordBatch`` with the one ``interactions`` column
        ``shapfusion explain --interactions`` writes. With ``background=``, the interaction
        index of the interventional game (each background row a reference, averaged), rows
        summing to the interventional values and the bias the background's mean margin; with
        ``index="banzhaf"``, Banzhaf interaction values, whole off the diagonal.
        """
        return self._compute(X, "interactions", as_arrow)

    def saabas_values(self, X: Any) -> np.ndarray:
        """Saabas values of every row of ``X``, in the layout of :meth:`shap_values`: the
        approximation ``pred_contribs(approx_contribs=True)`` (XGBoost) and shap's
        ``approximate=True`` compute. Each split on a row's path credits its feature with the
        change in the node's expected value (the cover-weighted mean of its leaves) from the node
        to the child the row takes. They add up to the margin but are not Shapley values: they
        depend on split order. Fast (one pass down each tree); a background plays no part.
        """
        values: np.ndarray = self._compute(X, "saabas", False)
        return values

    def predict_margin(self, X: Any, *, as_arrow: bool = False) -> np.ndarray | pyarrow.RecordBatch:
        """Margin (raw score) predictions: ``(n,)``, or ``(n, G)`` for G outputs.

        The same numbers as ``booster.predict(..., output_margin=True)`` (XGBoost) or
        ``raw_score=True`` (LightGBM), as the sum of the trees in float64.
        """
        return self._compute(X, "margin", as_arrow)

    # -- what it holds ---------------------------------------------------------------------

    @property
    def feature_names(self) -> list[str]:
        """The model's feature names, in its order (the columns of a plain array)."""
        return self._native.feature_names

    @property
    def num_groups(self) -> int:
        """Output groups G: classes of a multiclass model, targets of a multi-output one, else 1."""
        return self._native.num_groups

    @property
    def format(self) -> str:
        """The model file's format and library, as ``shapfusion models inspect`` prints it
        (``XGBoost JSON``, ``LightGBM text``, ...)."""
        return self._native.format

    @property
    def objective(self) -> str:
        """The model's objective as its library names it (``binary:logistic``, ``multiclass
        num_class:3``, ...)."""
        return self._native.objective

    @property
    def num_trees(self) -> int:
        """Trees in the model (for multiclass models, every class's trees)."""
        return self._native.num_trees

    @property
    def base_margin(self) -> list[float]:
        """The margin added to every prediction, per output group."""
        return self._native.base_margin

    def tree_arrays(self) -> list[dict[str, Any]]:
        """The trees as node arrays, one dict per tree, as shap's ``TreeEnsemble`` reads them:
        ``children_left``, ``children_right``, ``children_default`` (-1 at leaves), ``features``
        (-2 at leaves), ``thresholds`` (NaN for categorical splits and leaves), ``rules`` (0 leaf,
        1 ``x < t``, 2 ``x <= t``, 3 categorical), ``values`` (leaf values times the tree's weight;
        an internal node holds the cover-weighted mean of its leaves), ``node_sample_weight``
        (covers) and ``group`` (the output the tree adds to). A split on a CatBoost CTR of a
        combination of features reads a column after the model's features: ``features`` at or
        above the number of features name such columns, in the model's order of combinations."""
        return self._native.trees()

    @property
    def engine(self) -> str:
        """The engine that runs (what ``algorithm="auto"`` picked)."""
        return self._native.engine

    @property
    def threads(self) -> int:
        """Compute threads in use."""
        return self._native.threads

    def __repr__(self) -> str:
        kind = ", interventional" if self._interventional else ""
        return (
            f"shapfusion.Explainer({len(self.feature_names)} features, {self.num_groups} group(s), "
            f"engine={self.engine!r}, threads={self.threads}{kind})"
        )

    def _missing_as_nan(self, X: Any) -> Any:
        """``X`` with the model's own missing value (XGBoost's ``missing=``) as NaN."""
        if self._missing is None:
            return X
        X = _plain_rows(X)
        if _is_sparse(X):
            X = X.copy()
            X.data[X.data == self._missing] = np.nan
            return X
        if _is_pandas_frame(X):
            numeric = [c for c in X.columns if _is_plain_number(X[c].dtype)]
            X = X.copy()
            X[numeric] = X[numeric].mask(X[numeric] == self._missing)
            return X
        if hasattr(X, "__arrow_c_stream__") and not isinstance(X, np.ndarray):
            import pyarrow as pa

            return self._missing_as_nan(pa.table(X).to_pandas())
        array = np.array(X, dtype=np.float64)
        array[array == self._missing] = np.nan
        return array

    def _compute(self, X: Any, output: str, as_arrow: bool, labels: np.ndarray | None = None) -> Any:
        X = self._missing_as_nan(X)
        if _is_sparse(X):
            return self._compute_sparse(X, output, as_arrow, labels)
        rows, names = _rows(X)
        if as_arrow:
            return self._native.compute_arrow(rows, output, names)
        return self._native.compute(rows, output, names, labels)

    def _compute_sparse(self, X: Any, output: str, as_arrow: bool, labels: np.ndarray | None) -> Any:
        """A SciPy sparse matrix, densified a block of rows at a time (a wide matrix never
        whole). Entries it does not store are what the model's library makes of them: missing
        for XGBoost models (as in a DMatrix), 0 for the others (as LightGBM and scikit-learn
        read them)."""
        X = X.tocsr()
        fill = np.nan if self.format.startswith("XGBoost") else 0.0
        rows = max(1, _SPARSE_BLOCK_VALUES // max(X.shape[1], 1))
        parts = []
        for start in range(0, max(X.shape[0], 1), rows):
            part = X[start : start + rows]
            if fill == 0.0:
                dense = part.toarray().astype(np.float64)
            else:
                dense = np.full(part.shape, fill)
                part = part.tocoo()
                dense[part.row, part.col] = part.data
            part_labels = None if labels is None else labels[start : start + rows]
            parts.append(self._compute(dense, output, as_arrow, part_labels))
        if as_arrow:
            import pyarrow as pa

            return (
                pa.concat_batches(parts)
                if hasattr(pa, "concat_batches")
                else pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
            )
        return np.concatenate(parts, axis=0)


def datafusion_udfs(
    models: Mapping[str, str | os.PathLike[str]],
    *,
    algorithm: str = "auto",
    threads: int | None = None,
    background: str | os.PathLike[str] | None = None,
) -> list[Any]:
    """SQL functions ``shap``, ``shap_interactions`` and ``margin`` for Python's ``datafusion``.

    ``models`` maps the names queries use to model files (paths or object-store URLs); they are
    loaded now, so a wrong path fails here. Register the returned ``datafusion.ScalarUDF``
    objects on a ``SessionContext``; the functions are the ones ``shapfusion sql`` runs, with the
    same numbers and the same struct layout::

        ctx = datafusion.SessionContext()
        for udf in shapfusion.datafusion_udfs(models={"fraud": "fraud.json"}):
            ctx.register_udf(udf)
        ctx.sql("SELECT shap('fraud', amount, age, ...)['amount'] FROM payments")

    ``background`` (a Parquet/CSV path or URL) makes ``shap`` interventional over those rows.
    Needs a shapfusion built with DataFusion (``--features datafusion``) and Python's
    ``datafusion`` with the same major version (checked here, with the version to install).
    """
    if not _shapfusion.HAS_DATAFUSION:
        raise NotImplementedError(
            "this build of shapfusion has no DataFusion support; build it with the datafusion "
            "feature: MATURIN_PEP517_ARGS='--features shapfusion-python/datafusion' pip install ./python"
        )
    datafusion = _import_datafusion()
    exported = _shapfusion.datafusion_udfs(
        [(str(name), os.fspath(path)) for name, path in models.items()],
        algorithm=algorithm,
        threads=_threads(threads),
        background=None if background is None else os.fspath(background),
    )
    return [datafusion.ScalarUDF.from_pycapsule(udf) for udf in exported]


# -- helpers ---------------------------------------------------------------------------------


def _import_datafusion() -> Any:
    """Python's ``datafusion``, if its major version is the one this build's FFI speaks."""
    wanted = _shapfusion.DATAFUSION_VERSION
    try:
        import datafusion
    except ImportError as e:
        raise ImportError(
            f"shapfusion.datafusion_udfs needs Python's datafusion {wanted.split('.')[0]}.x: "
            f"pip install 'datafusion=={wanted.split('.')[0]}.*'"
        ) from e
    found = getattr(datafusion, "__version__", "unknown")
    if found.split(".")[0] != wanted.split(".")[0]:
        raise ImportError(
            f"shapfusion's SQL functions are built against DataFusion {wanted} (datafusion-ffi), "
            f"but the installed Python datafusion is {found}; the FFI works within one major "
            f"version: pip install 'datafusion=={wanted.split('.')[0]}.*'"
        )
    return datafusion


def _threads(threads: int | None) -> int:
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer or None (all cores), got {threads!r}")
    return threads


def _model_source(model: ModelLike) -> dict[str, Any]:
    """What the native explainer reads for any accepted model: ``path``, ``data`` (a model
    file's bytes) or ``spark_files`` (a Spark ML model directory's files, (relative path,
    bytes)), and its ``name`` for messages."""
    if isinstance(model, (str, os.PathLike)):
        return {"path": os.fspath(os.path.expanduser(model)), "name": os.fspath(model)}
    if isinstance(model, (bytes, bytearray, memoryview)):
        return {"data": bytes(model), "name": "<bytes>"}
    module = type(model).__module__ or ""
    if module.startswith("xgboost.spark"):
        return {"data": bytes(model.get_booster().save_raw(raw_format="ubj")), "name": f"<{type(model).__name__}>"}
    if module.startswith("xgboost"):
        booster = model.get_booster() if hasattr(model, "get_booster") else model
        return {"data": bytes(booster.save_raw(raw_format="ubj")), "name": "<xgboost.Booster>"}
    if module.startswith("lightgbm"):
        lgb_booster: Any = getattr(model, "booster_", model)
        return {"data": lgb_booster.model_to_string().encode("utf-8"), "name": "<lightgbm.Booster>"}
    if _trees_file.is_sklearn_estimator(model):
        return {"data": _trees_file.to_json_bytes(model), "name": f"<sklearn {type(model).__name__}>"}
    if module.startswith("catboost"):
        return {"data": _catboost_json(model), "name": f"<catboost {type(model).__name__}>"}
    if module.startswith("pyspark.ml") and hasattr(model, "write"):
        return {"spark_files": _spark_model_files(model), "name": f"<{type(model).__name__}>"}
    raise TypeError(
        "model must be a path, the bytes of a model file, an xgboost Booster/XGBModel, a "
        "lightgbm Booster/LGBMModel, a fitted scikit-learn tree estimator, a catboost model or a "
        f"fitted pyspark.ml tree model (alone, in a PipelineModel or tuned); got {type(model).__module__}.{type(model).__qualname__}"
    )


def _spark_model_files(model: Any) -> list[tuple[str, bytes]]:
    """A fitted ``pyspark.ml`` model's directory (as ``model.write().save`` writes it) as
    (relative path, bytes) pairs."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="shapfusion-sparkml-") as tmp:
        target = os.path.join(tmp, "model")
        model.write().save("file://" + target)
        return _directory_files(target)


def _directory_files(root: str) -> list[tuple[str, bytes]]:
    """The files of the Spark ML model directory ``root`` that the reader reads (the model's,
    or its pipeline stages' and tuned best model's; not a tuning model's sub-models) as (path
    relative to it, with ``/``, bytes), in a stable order."""
    # A build without Spark ML support ships every file, for the native side's clear refusal.
    wanted = getattr(_shapfusion, "spark_model_path", lambda relative, is_dir: True)
    files = []
    for dirpath, dirnames, names in os.walk(root):
        relative_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        prefix = "" if relative_dir == "." else relative_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if wanted(prefix + d, True))
        for n in sorted(names):
            if not wanted(prefix + n, False):
                continue
            with open(os.path.join(dirpath, n), "rb") as f:
                files.append((prefix + n, f.read()))
    return files


def _xgboost_missing_value(model: Any) -> float | None:
    """The value an XGBoost scikit-learn model reads as missing besides NaN (its ``missing``
    parameter), or None."""
    if not (type(model).__module__ or "").startswith("xgboost"):
        return None
    missing = getattr(model, "missing", None)
    if missing is None or isinstance(missing, bool):
        return None
    try:
        value = float(missing)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(value) else value


def _catboost_json(model: Any) -> bytes:
    """A CatBoost model's JSON (``save_model(format="json")``), through a temporary file."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="shapfusion-catboost-") as tmp:
        path = os.path.join(tmp, "model.json")
        model.save_model(path, format="json")
        with open(path, "rb") as f:
            return f.read()


def _rows(X: Any) -> tuple[Any, Sequence[str] | None]:
    """What the native side reads: (float64 C-contiguous matrix, column names or None), or
    (an object with the Arrow PyCapsule interface, None)."""
    X = _plain_rows(X)
    if _is_pandas_frame(X):
        names = [str(c) for c in X.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"X has repeated column names: {names}")
        if all(_is_plain_number(t) for t in X.dtypes):
            return np.ascontiguousarray(X.to_numpy(dtype=np.float64, na_value=np.nan)), names
        # Categorical and string columns: through Arrow, so category names map to the codes the
        # model was trained with (not pandas' own codes).
        try:
            import pyarrow as pa
        except ImportError as e:
            raise ImportError("X has non-numeric columns, which shapfusion reads through pyarrow: pip install pyarrow") from e
        return pa.Table.from_pandas(X, preserve_index=False), None
    if hasattr(X, "__arrow_c_stream__") or hasattr(X, "__arrow_c_array__"):
        return X, None
    array = np.asarray(X)
    if array.ndim != 2:
        raise ValueError(f"X must be 2-D (rows × features), got shape {array.shape}; for one row use X.reshape(1, -1)")
    try:
        return np.ascontiguousarray(array, dtype=np.float64), None
    except (TypeError, ValueError) as e:
        raise ValueError(f"X must hold numbers (None and NaN are missing values): {e}") from e


def _plain_rows(X: Any) -> Any:
    """A one-row pandas Series as a one-row DataFrame, an XGBoost DMatrix as a DataFrame of its
    values (entries it does not store are missing, as in XGBoost), and a numeric catboost.Pool
    as a DataFrame of its features; anything else as is."""
    module = type(X).__module__ or ""
    if module.startswith("pandas") and type(X).__name__ == "Series":
        return X.to_frame().T.infer_objects()
    if module.startswith("catboost") and type(X).__name__ == "Pool":
        import pandas as pd

        if X.get_cat_feature_indices():
            raise ValueError(
                "a catboost.Pool with categorical features keeps only their hashes, not their values; "
                "pass the rows themselves (a DataFrame) instead of the Pool"
            )
        return pd.DataFrame(np.asarray(X.get_features(), dtype=np.float64), columns=X.get_feature_names())
    if module.startswith("xgboost") and type(X).__name__ == "DMatrix":
        import pandas as pd

        csr = X.get_data()
        dense = np.full(csr.shape, np.nan)
        rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
        dense[rows, csr.indices] = csr.data
        names = X.feature_names or [f"f{j}" for j in range(csr.shape[1])]
        return pd.DataFrame(dense, columns=names)
    return X


#: Values densified at a time from a sparse matrix (128 MiB of float64).
_SPARSE_BLOCK_VALUES = 1 << 24


def _is_sparse(X: Any) -> bool:
    """A SciPy sparse matrix or array (without importing SciPy)."""
    return (type(X).__module__ or "").startswith("scipy.sparse") and hasattr(X, "tocsr")


def _is_pandas_frame(X: Any) -> bool:
    return (type(X).__module__ or "").startswith("pandas") and hasattr(X, "dtypes") and hasattr(X, "columns")


def _is_plain_number(dtype: Any) -> bool:
    """A pandas dtype that converts to float64 without losing meaning (numbers, booleans,
    pandas' nullable numbers); categoricals and strings are not."""
    kind = getattr(dtype, "kind", None)
    return kind in ("b", "i", "u", "f") and type(dtype).__name__ != "CategoricalDtype"


# shap's interface, over the Explainer above (imported last: it builds on it).
from .shap_compat import TreeExplainer, patch_shap, unpatch_shap
