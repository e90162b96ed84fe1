"""Type stubs of the native module; the documented API is ``shapfusion.Explainer`` and
``shapfusion.datafusion_udfs``."""

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__version__: str
#: Whether this build carries the DataFusion SQL functions (``--features datafusion``).
HAS_DATAFUSION: bool
#: The DataFusion release the SQL functions are built against (builds with DataFusion only).
DATAFUSION_VERSION: str

def spark_model_path(relative: str, is_dir: bool) -> bool:
    """Whether a path inside a Spark ML model directory is read (builds with Spark ML support)."""

class NativeExplainer:
    def __init__(
        self,
        *,
        path: str | os.PathLike[str] | None = None,
        data: bytes | None = None,
        name: str = "<memory>",
        algorithm: str = "auto",
        threads: int = 0,
        background: Any = None,
        background_names: Sequence[str] | None = None,
        transform: str = "identity",
        tree_limit: int | None = None,
        spark_files: Sequence[tuple[str, bytes]] | None = None,
        cover_rows: Any = None,
        cover_names: Sequence[str] | None = None,
        device: str = "cpu",
        index: str = "shapley",
        describe: bool = False,
    ) -> None: ...
    def compute(
        self, x: Any, output: str, names: Sequence[str] | None = None, labels: np.ndarray | None = None
    ) -> np.ndarray: ...
    def compute_arrow(self, x: Any, output: str, names: Sequence[str] | None = None) -> Any: ...
    @property
    def feature_names(self) -> list[str]: ...
    @property
    def num_groups(self) -> int: ...
    @property
    def num_trees(self) -> int: ...
    @property
    def objective(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def base_margin(self) -> list[float]: ...
    def trees(self) -> list[dict[str, Any]]: ...
    @property
    def engine(self) -> str: ...
    @property
    def threads(self) -> int: ...

class ExportedUdf:
    """One SQL function in the datafusion-ffi form (``__datafusion_scalar_udf__``)."""
    @property
    def name(self) -> str: ...
    def __datafusion_scalar_udf__(self) -> object: ...

def datafusion_udfs(
    models: Sequence[tuple[str, str]], *, algorithm: str = "auto", threads: int = 0, background: str | None = None
) -> list[ExportedUdf]: ...
