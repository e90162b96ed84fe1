"""Models trained here with the pinned libraries (tests/requirements.txt), so every expected value
comes from XGBoost or LightGBM themselves."""

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]


def relative_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    """max |ours - theirs| over max |theirs|: the libraries compute in float32."""
    ours, theirs = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    return float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-300))


def frame(n: int, features: int, seed: int, missing: float = 0.1) -> pd.DataFrame:
    """Numbers with NaN holes, named f_0..f_{k-1} (not XGBoost's default names)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, features))
    X[rng.random(X.shape) < missing] = np.nan
    return pd.DataFrame(X, columns=[f"f_{i}" for i in range(features)])


def labels(X: pd.DataFrame, classes: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    score = np.nan_to_num(X.to_numpy()) @ rng.normal(size=X.shape[1]) + 0.3 * rng.normal(size=len(X))
    if classes == 2:
        return (score > 0).astype(int)
    return np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))


@pytest.fixture(scope="session")
def data() -> pd.DataFrame:
    return frame(600, 6, seed=1)


@pytest.fixture(scope="session")
def xgb_binary(data):
    import xgboost as xgb

    dtrain = xgb.DMatrix(data, label=labels(data, 2, 2))
    return xgb.train({"objective": "binary:logistic", "max_depth": 4, "eta": 0.3, "nthread": 2}, dtrain, 20)


@pytest.fixture(scope="session")
def xgb_multiclass(data):
    import xgboost as xgb

    dtrain = xgb.DMatrix(data, label=labels(data, 3, 3))
    params = {"objective": "multi:softprob", "num_class": 3, "max_depth": 3, "eta": 0.3, "nthread": 2}
    return xgb.train(params, dtrain, 10)


@pytest.fixture(scope="session")
def categorical_data() -> pd.DataFrame:
    rng = np.random.default_rng(4)
    X = frame(600, 4, seed=5)
    X["colour"] = pd.Categorical(rng.choice(["red", "green", "blue", "grey", "teal"], size=len(X)))
    X.loc[rng.random(len(X)) < 0.05, "colour"] = None
    return X


@pytest.fixture(scope="session")
def xgb_categorical(categorical_data):
    import xgboost as xgb

    y = labels(categorical_data.drop(columns="colour"), 2, 6) ^ (categorical_data["colour"] == "red").to_numpy()
    dtrain = xgb.DMatrix(categorical_data, label=y, enable_categorical=True)
    params = {"objective": "binary:logistic", "max_depth": 4, "max_cat_to_onehot": 1, "nthread": 2}
    return xgb.train(params, dtrain, 15)


@pytest.fixture(scope="session")
def lgb_binary(data):
    import lightgbm as lgb

    train = lgb.Dataset(data, label=labels(data, 2, 7))
    return lgb.train({"objective": "binary", "num_leaves": 15, "verbose": -1, "num_threads": 2}, train, 20)


@pytest.fixture(scope="session")
def lgb_multiclass(data):
    import lightgbm as lgb

    train = lgb.Dataset(data, label=labels(data, 3, 8))
    params = {"objective": "multiclass", "num_class": 3, "num_leaves": 7, "verbose": -1, "num_threads": 2}
    return lgb.train(params, train, 10)


@pytest.fixture(scope="session")
def lgb_categorical(categorical_data):
    import lightgbm as lgb

    y = labels(categorical_data.drop(columns="colour"), 2, 9) ^ (categorical_data["colour"] == "teal").to_numpy()
    train = lgb.Dataset(categorical_data, label=y)
    params = {"objective": "binary", "num_leaves": 15, "min_data_per_group": 5, "cat_smooth": 1, "verbose": -1, "num_threads": 2}
    return lgb.train(params, train, 15)


def _cli() -> Path | None:
    given = os.environ.get("SHAPFUSION_BIN")
    if given:
        return Path(given)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    for profile in ("debug", "release"):
        if (target / profile / "shapfusion").is_file():
            return target / profile / "shapfusion"
    return shutil.which("shapfusion") and Path(shutil.which("shapfusion"))


@pytest.fixture(scope="session")
def cli() -> Path:
    """The `shapfusion` binary (SHAPFUSION_BIN, else the cargo target dir). CI sets
    SHAPFUSION_REQUIRE_CLI=1, so a missing binary fails there instead of skipping."""
    path = _cli()
    if path is None or not path.is_file():
        if os.environ.get("SHAPFUSION_REQUIRE_CLI") == "1":
            pytest.fail("SHAPFUSION_REQUIRE_CLI=1 but no shapfusion binary: set SHAPFUSION_BIN or build it (cargo build)")
        pytest.skip("no shapfusion binary (set SHAPFUSION_BIN or run cargo build)")
    return path
