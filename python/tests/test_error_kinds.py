"""Errors of the native code reach Python as the exception their kind says, with the message the
command line prints (every cause included)."""

import numpy as np
import pytest

import shapfusion
from conftest import REPO

MODEL = REPO / "examples" / "models" / "fraud.json"


def test_a_missing_model_file_is_file_not_found(tmp_path):
    missing = tmp_path / "nowhere.json"
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        shapfusion.Explainer(missing)


def test_a_corrupt_model_is_a_value_error():
    with pytest.raises(ValueError, match="not a valid"):
        shapfusion.Explainer(b'{"learner": {"gradient_booster": 3}}')


def test_a_model_we_do_not_compute_is_not_implemented():
    # A linear tree's leaves need the values a coalition leaves out: only a background has them.
    linear = REPO / "tests" / "fixtures" / "linear" / "lgb_linear_regression" / "model.txt"
    with pytest.raises(NotImplementedError, match="linear_tree"):
        shapfusion.Explainer(linear)


def test_a_bound_reached_is_a_memory_error():
    # The probability transform keeps background rows × leaves; 60,000 rows of this
    # 5,000-leaf model pass the 1 GiB bound before any work is done.
    explainer = shapfusion.Explainer(MODEL)
    background = np.zeros((60_000, len(explainer.feature_names)))
    with pytest.raises(MemoryError, match="over the bound"):
        shapfusion.Explainer(MODEL, background=background, transform="logistic")


def test_an_unreachable_object_store_is_a_connection_error_with_its_causes(monkeypatch):
    if not shapfusion._shapfusion.HAS_DATAFUSION:
        pytest.skip("shapfusion built without --features datafusion")
    pytest.importorskip("datafusion")
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    for key, value in {
        "AWS_ENDPOINT": "http://127.0.0.1:9",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConnectionError) as raised:
        shapfusion.datafusion_udfs(models={"fraud": "s3://models/fraud.json"})
    message = str(raised.value)
    assert "s3://models/fraud.json" in message
    assert "caused by:" in message and "refused" in message.lower(), message
