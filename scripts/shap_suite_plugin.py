"""pytest plugin for scripts/shap_suite.py: shap's own tests, offline, against shapfusion.

shap's tests download their data sets (California housing, Adult, LightGBM's ranking data, 20
newsgroups); with no network, each is made here instead, with the same columns, types and
sizes, from a fixed seed. The numbers differ from the real data; what the tests check (layouts,
additivity, agreement between explainers, errors) does not depend on them. Unless
SHAP_SUITE_ORIGINAL=1, shap's TreeExplainer is replaced by shapfusion's (``patch_shap()``)
before any test runs."""

import os

import numpy as np


def _california():
    from sklearn.utils import Bunch

    rng = np.random.default_rng(0)
    n = 20640
    names = ["MedInc", "HouseAge", "AveRooms", "AveBedrms", "Population", "AveOccup", "Latitude", "Longitude"]
    X = np.column_stack(
        [
            rng.gamma(4.0, 1.0, n),
            rng.integers(1, 53, n).astype(float),
            rng.gamma(5.0, 1.1, n),
            rng.gamma(20.0, 0.055, n),
            rng.gamma(2.0, 700.0, n).round(),
            rng.gamma(6.0, 0.5, n),
            rng.uniform(32.5, 42.0, n),
            rng.uniform(-124.3, -114.3, n),
        ]
    )
    y = np.clip(0.4 * X[:, 0] + 0.01 * X[:, 1] - 0.3 * (X[:, 6] - 36) + rng.normal(0, 0.5, n), 0.15, 5.0)
    return Bunch(data=X, target=y, feature_names=names, frame=None, DESCR="synthetic, California housing's columns")


def _write_adult(path):
    """adult.data's layout: 15 comma-separated fields, categories with a leading space, '?' missing."""
    rng = np.random.default_rng(1)
    n = 32561

    def pick(values, p=None):
        return rng.choice(values, n, p=p)

    work = pick([" Private", " Self-emp-not-inc", " Local-gov", " State-gov", " Federal-gov", " Self-emp-inc", " Without-pay", "?"])
    education = pick([" Bachelors", " HS-grad", " 11th", " Masters", " 9th", " Some-college", " Assoc-acdm", " Doctorate"])
    marital = pick([" Married-civ-spouse", " Never-married", " Divorced", " Separated", " Widowed"])
    occupation = pick([" Adm-clerical", " Exec-managerial", " Handlers-cleaners", " Prof-specialty", " Sales", " Craft-repair", "?"])
    relationship = pick([" Not-in-family", " Unmarried", " Other-relative", " Own-child", " Husband", " Wife"])
    race = pick([" White", " Black", " Asian-Pac-Islander", " Other"])
    sex = pick([" Male", " Female"])
    country = pick([" United-States", " Mexico", " Philippines", " Germany", "?"], p=[0.85, 0.05, 0.04, 0.03, 0.03])
    age, education_num = rng.integers(17, 90, n), rng.integers(1, 17, n)
    gain = np.where(rng.random(n) < 0.08, rng.integers(100, 99999, n), 0)
    loss = np.where(rng.random(n) < 0.05, rng.integers(100, 4000, n), 0)
    hours, weight = rng.integers(1, 99, n), rng.integers(10000, 1000000, n)
    score = 0.05 * (age - 38) + 0.4 * (education_num - 10) + 1.5 * (marital == " Married-civ-spouse") + gain / 5000 + rng.normal(0, 1, n)
    target = np.where(score > 1.5, " >50K", " <=50K")
    columns = (age, work, weight, education, education_num, marital, occupation, relationship, race, sex, gain, loss, hours, country, target)
    with open(path, "w") as f:
        for row in zip(*columns):
            f.write(",".join(str(v) for v in row) + "\n")


def _write_rank(directory):
    """LightGBM's lambdarank example files: svmlight rows (300 sparse features) and query sizes."""
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(2)
    for split, queries in (("train", 201), ("test", 50)):
        sizes = rng.integers(5, 30, queries)
        n = int(sizes.sum())
        X = np.where(rng.random((n, 300)) < 0.1, rng.normal(size=(n, 300)), 0.0)
        y = np.clip((X[:, :5].sum(axis=1) + rng.normal(0, 0.5, n)).round() + 2, 0, 4)
        dump_svmlight_file(X, y, os.path.join(directory, f"rank.{split}"))
        np.savetxt(os.path.join(directory, f"rank.{split}.query"), sizes, fmt="%d")


def _newsgroups(subset="train", categories=None, **_):
    """Two-topic texts: shared words and each topic's own."""
    from sklearn.utils import Bunch

    rng = np.random.default_rng(3 if subset == "train" else 4)
    topic_words = [f"w{i}" for i in range(3000)]
    common = [f"c{i}" for i in range(200)]
    n = 1079 if subset == "train" else 717
    target = rng.integers(0, 2, n)
    texts = []
    for t in target:
        words = list(rng.choice(common, rng.integers(20, 120))) + list(rng.choice(topic_words[t * 1500 : (t + 1) * 1500], rng.integers(5, 60)))
        rng.shuffle(words)
        texts.append(" ".join(words))
    return Bunch(data=texts, target=target, target_names=list(categories or ["a", "b"]))


def pytest_configure(config):
    import shap.datasets
    import sklearn.datasets

    sklearn.datasets.fetch_california_housing = lambda *args, **kwargs: _california()
    sklearn.datasets.fetch_20newsgroups = _newsgroups
    directory = os.environ.get("SHAP_SUITE_DATA") or os.path.join(os.path.dirname(shap.datasets.__file__), "cached_data")
    os.makedirs(directory, exist_ok=True)

    def cache(url, file_name=None):
        name = file_name or os.path.basename(url)
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            if name == "adult.data":
                _write_adult(path)
            elif name.startswith("rank."):
                _write_rank(directory)
            else:
                raise RuntimeError(f"shap_suite: no offline stand-in for {url}")
        return path

    shap.datasets.cache = cache
    if os.environ.get("SHAP_SUITE_ORIGINAL") != "1":
        import shapfusion

        shapfusion.patch_shap()
