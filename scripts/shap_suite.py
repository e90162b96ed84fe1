#!/usr/bin/env python3
"""shap's own TreeExplainer tests, run against shapfusion.TreeExplainer.

Fetches the source release of the installed shap from PyPI (its tests are not in the wheel;
cached under ~/.cache/shapfusion/shap-suite), runs tests/explainers/test_tree.py and
test_explainer.py with shap's TreeExplainer replaced by shapfusion's (``patch_shap()``) and the
data sets they download made offline (scripts/shap_suite_plugin.py), and compares the outcome
with the list below of tests that are expected to fail, each because shap refuses or gets wrong
what shapfusion computes exactly (docs/src/python.md, "Coming from shap"; each has an
exactness test in python/tests/test_shap_conventions.py).

    python scripts/shap_suite.py              # against shapfusion; exit 1 on any other failure
    python scripts/shap_suite.py --original   # shap itself, for comparison

Needs shap, pytest, the libraries the tests import (xgboost, lightgbm, catboost, scikit-learn,
pyspark, matplotlib, IPython) and shapfusion installed in the running Python.
"""

import argparse
import html
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ElementTree
from pathlib import Path

#: Tests that fail against shapfusion by design: shap expects a refusal where shapfusion
#: computes the exact answer.
EXPECTED_FAILURES = {
    "explainers/test_tree.py::TestExplainerSklearn::test_gradient_boosting_classifier_invalid_init_estimator": (
        "shap refuses GradientBoostingClassifier(init='zero'); shapfusion explains it exactly"
    ),
    "explainers/test_tree.py::TestExplainerXGBoost::test_xgboost_multiclass": (
        "expects explainer.model.predict to refuse XGBoost random forests; shapfusion predicts XGBoost's margin"
    ),
}

#: The test files run, and what a file that is not in the source release means.
TEST_FILES = ["tests/explainers/test_tree.py", "tests/explainers/test_explainer.py"]


def source_release(version: str, cache: Path) -> Path:
    """shap's source release of ``version``, downloaded once."""
    target = cache / f"shap-{version}.tar.gz"
    if not target.exists():
        # The simple index (PEP 503), which mirrors serve as well as PyPI.
        index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
        with urllib.request.urlopen(f"{index}/shap/", timeout=60) as response:
            page = response.read().decode("utf-8", "replace")
        links = re.findall(r'href="([^"#]*shap-' + re.escape(version) + r'\.tar\.gz)', page)
        if not links:
            raise SystemExit(f"shap_suite: {index}/shap/ lists no source release of shap {version}")
        with urllib.request.urlopen(urllib.parse.urljoin(f"{index}/shap/", html.unescape(links[0])), timeout=120) as response:
            data = response.read()
        cache.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        partial.write_bytes(data)
        partial.replace(target)
    return target


def extract_tests(archive: Path, into: Path) -> Path:
    """The release's tests/ directory under ``into``; returns the release root."""
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if "/tests/" in m.name and m.isfile() and not m.issym() and not m.islnk()]
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, members=members, filter="data")
        else:
            # Python before 3.11.4 (Debian 12's 3.11.2) has no extraction filters: the members
            # are regular files already; refuse any that would land outside `into`.
            for member in members:
                if Path(member.name).is_absolute() or ".." in Path(member.name).parts:
                    raise SystemExit(f"shap_suite: {archive} has a member outside its root: {member.name}")
            tar.extractall(into, members=members)
    roots = [p for p in into.iterdir() if p.is_dir()]
    if len(roots) != 1:
        raise SystemExit(f"shap_suite: unexpected layout in {archive}")
    return roots[0]


def outcomes(report: Path) -> dict:
    """Test id → passed / failed / skipped, from pytest's JUnit XML."""
    results = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        # classname is the module's dotted path, then the class if the test is in one.
        parts = case.get("classname", "").split(".")
        cls = parts.pop() if parts and parts[-1].startswith("Test") else None
        name = "/".join(parts) + ".py::" + (f"{cls}::" if cls else "") + case.get("name", "")
        if case.find("failure") is not None or case.find("error") is not None:
            results[name] = "failed"
        elif case.find("skipped") is not None:
            results[name] = "skipped"
        else:
            results[name] = "passed"
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--original", action="store_true", help="run shap's own TreeExplainer, for comparison")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "shapfusion" / "shap-suite")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args()
    import shap

    archive = source_release(shap.__version__, args.cache)
    with tempfile.TemporaryDirectory(prefix="shap-suite-") as tmp:
        root = extract_tests(archive, Path(tmp))
        report = Path(tmp) / "report.xml"
        env = dict(os.environ, MPLBACKEND="Agg", SHAP_SUITE_DATA=str(Path(tmp) / "data"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent), env.get("PYTHONPATH")]))
        env["SHAP_SUITE_ORIGINAL"] = "1" if args.original else "0"
        command = [
            sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(root / "tests"), "-p", "shap_suite_plugin",
            "-m", "not xslow", "-q", "-p", "no:cacheprovider", "-W", "ignore", f"--junitxml={report}", *args.pytest_args,
            *[str(root / f) for f in TEST_FILES],
        ]  # fmt: skip
        print("shap_suite: shap", shap.__version__, "tests,", "shap's own TreeExplainer" if args.original else "shapfusion.TreeExplainer", flush=True)
        completed = subprocess.run(command, cwd=root / "tests", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if not report.exists():
            print(completed.stdout)
            print("shap_suite: pytest wrote no report", file=sys.stderr)
            return 1
        results = outcomes(report)
    counts = {k: sum(v == k for v in results.values()) for k in ("passed", "failed", "skipped")}
    print(f"shap_suite: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped of {len(results)}")
    if args.original:
        for name, result in sorted(results.items()):
            if result == "failed":
                print(f"  failed with shap itself: {name}")
        return 0
    unexpected = sorted(n for n, r in results.items() if r == "failed" and n not in EXPECTED_FAILURES)
    for name, reason in sorted(EXPECTED_FAILURES.items()):
        state = results.get(name, "not run")
        print(f"  expected to differ ({state}): {name}: {reason}")
    if unexpected:
        print(completed.stdout[-20000:])
        for name in unexpected:
            print(f"shap_suite: FAILED, not an expected difference: {name}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
