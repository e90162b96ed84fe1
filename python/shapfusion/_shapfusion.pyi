"""Type stubs of the native module; the documented API is ``shapfusion.Explainer`` and
``shapfusion.datafusion_udfs``."""

import os
from typing import Any, Optional, Sequence, Tuple

import numpy as np

__version__: str
#: Whether this build carries the DataFusion SQL functions (``--features datafusion``).
HAS_DATAFUSION: bool
#: The DataFusion release the SQL functions are built against (builds with DataFusion only).
DATAFUSION_VERSION: str

class NativeExplainer:
    def __init__(
        self,
        *,
        path: Optional[str | os.PathLike[str]] = None,
        data: Optional[bytes] = None,
        name: str = "<memory>",
        algorithm: str = "auto",
        threads: int = 0,
        background: Any = None,
        background_names: Optional[Sequence[str]] = None,
        transform: str = "identity",
        tree_limit: Optional[int] = None,
        spark_files: Optional[Sequence[Tuple[str, bytes]]] = None,
        cover_rows: Any = None,
        cover_names: Optional[Sequence[str]] = None,
    ) -> None: ...
    def compute(self, x: Any, output: str, names: Optional[Sequence[str]] = None) -> np.ndarray: ...
    def compute_arrow(self, x: Any, output: str, names: Optional[Sequence[str]] = None) -> Any: ...
    @property
    def feature_names(self) -> list[str]: ...
    @property
    def num_groups(self) -> int: ...
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
    models: Sequence[Tuple[str, str]], *, algorithm: str = "auto", threads: int = 0, background: Optional[str] = None
) -> list[ExportedUdf]: ...
