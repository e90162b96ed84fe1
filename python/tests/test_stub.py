"""The type stub ``shapfusion/_shapfusion.pyi`` against the native module it describes: every
public name and member of the native module is typed, nothing is typed that the module lacks,
each method's parameters are the native signature's, and the package reaches the native module
only through typed names (mypy --strict checks the package against the stub, so an untyped
member would be an unchecked call)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import shapfusion
from shapfusion import _shapfusion

PACKAGE = Path(shapfusion.__file__).parent
STUB = ast.parse((PACKAGE / "_shapfusion.pyi").read_text())


def _stub_module_names() -> set[str]:
    names = set()
    for node in STUB.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _stub_class(name: str) -> ast.ClassDef:
    for node in STUB.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"the stub has no class {name}")


def _stub_members(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}


def _public(names: list[str]) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def _native_classes() -> list[str]:
    return [n for n in dir(_shapfusion) if isinstance(getattr(_shapfusion, n), type)]


def test_every_native_name_is_typed_and_nothing_else():
    native = _public(dir(_shapfusion)) | {"__version__"}
    stub = _stub_module_names()
    # DATAFUSION_VERSION, ExportedUdf and datafusion_udfs exist only in --features datafusion
    # builds; the stub types them for those.
    optional = {"DATAFUSION_VERSION", "ExportedUdf", "datafusion_udfs"}
    assert native - stub == set(), f"native names the stub does not type: {sorted(native - stub)}"
    extra = stub - native - (set() if _shapfusion.HAS_DATAFUSION else optional)
    assert extra == set(), f"the stub types names the native module lacks: {sorted(extra)}"


@pytest.mark.parametrize("class_name", ["NativeExplainer", "ExportedUdf"])
def test_every_native_member_is_typed_with_its_parameters(class_name):
    if not hasattr(_shapfusion, class_name):
        pytest.skip(f"{class_name} is in --features datafusion builds only")
    cls = getattr(_shapfusion, class_name)
    stub = _stub_members(_stub_class(class_name))
    native = {n for n in dir(cls) if not n.startswith("_") or n == "__datafusion_scalar_udf__"}
    assert native == set(stub) - {"__init__"}, (
        f"{class_name}: untyped {sorted(native - set(stub))}, typed but missing {sorted(set(stub) - {'__init__'} - native)}"
    )
    for name in native:
        member = inspect.getattr_static(cls, name)
        typed = stub[name]
        is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in typed.decorator_list)
        assert is_property == (type(member).__name__ == "getset_descriptor"), f"{class_name}.{name}: property or method differs"
        if is_property:
            continue
        signature = getattr(member, "__text_signature__", None)
        assert signature, f"{class_name}.{name} has no native signature"
        native_params = [p.split("=")[0].strip().lstrip("*$") for p in signature.strip("()").split(",") if p.strip()]
        native_params = [p for p in native_params if p not in ("self", "/", "")]
        args = typed.args
        typed_params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg != "self"]
        assert native_params == typed_params, f"{class_name}.{name}: native ({', '.join(native_params)}), typed ({', '.join(typed_params)})"


def test_the_constructor_takes_what_the_stub_says():
    signature = _shapfusion.NativeExplainer.__text_signature__
    native = [p.split("=")[0].strip() for p in signature.strip("()").split(",")]
    native = [p for p in native if p not in ("$cls", "*", "/", "")]
    init = _stub_members(_stub_class("NativeExplainer"))["__init__"]
    assert native == [a.arg for a in init.args.kwonlyargs]


def test_the_package_reaches_the_native_module_only_through_typed_names():
    typed = _stub_module_names()
    members = {name for cls in _native_classes() if cls in typed for name in _stub_members(_stub_class(cls))}
    for path in PACKAGE.glob("*.py"):
        source = path.read_text()
        for name in re.findall(r"_shapfusion\.(\w+)", source):
            assert name in typed, f"{path.name} uses _shapfusion.{name}, which the stub does not type"
        # The native explainer is held as `self._native` or `self._explainer._native` where it
        # is used: every attribute read through it must be typed.
        for name in re.findall(r"\._native\.(\w+)", source):
            assert name in members, f"{path.name} reads _native.{name}, which the stub does not type"
