"""Untrusted model names through the encoders and the stub renderer."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import keyword
import sys

import pytest

from aot.bundle import names, render, stubs
from aot.runtime.manifest import TensorSig
from conftest import HOSTILE, hostile_manifest



@pytest.mark.parametrize("name", HOSTILE)
def test_identifier_is_valid_python(name):
    ident = names.py_identifier(name)
    assert ident.isidentifier() and not keyword.iskeyword(ident)
    assert len(ident) <= names.MAX_IDENT + 10


def test_identifiers_stay_unique_after_mangling():
    taken: set[str] = set()
    idents = [names.py_identifier(n, taken) for n in ["a.b", "a_b", "a-b", "a b", "a.b", "1", "_1", "t_1"]]
    assert len(set(idents)) == len(idents)


@pytest.mark.parametrize("name", HOSTILE)
def test_string_literal_round_trips(name):
    literal = names.py_str(name)
    assert "\n" not in literal and literal.isascii()
    assert ast.literal_eval(literal) == name


@pytest.mark.parametrize("name", HOSTILE)
def test_file_name_is_portable(name):
    f = names.file_name(name, ".py")
    assert f.endswith(".py") and "/" not in f and "\\" not in f and not f.startswith(".")
    assert all(c.isalnum() or c in "._-" for c in f) and len(f) <= 70


@pytest.mark.parametrize("name", HOSTILE)
def test_stub_parses_and_imports_without_side_effects(name, tmp_path, capfd):
    file_name, source = stubs.python_stub(hostile_manifest(name))
    tree = ast.parse(source)
    # Top level holds only a docstring, imports, constants, functions and the class: importing
    # runs nothing model-derived (it imports the runtime, nothing else).
    kinds = {type(n).__name__ for n in tree.body}
    assert kinds <= {"Expr", "ImportFrom", "Import", "Assign", "ClassDef", "FunctionDef"}
    path = tmp_path / file_name
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("hostile_stub", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = next(v for v in vars(module).values() if isinstance(v, type) and v.__module__ == "hostile_stub")
    assert cls.INPUT_NAMES == (name, name + "2", "x")      # exact names survive as data
    assert cls.OUTPUT_NAMES == (name + "'out",)
    assert capfd.readouterr().out == ""
    sys.modules.pop("hostile_stub", None)


def test_template_refuses_a_raw_string():
    env = render.environment()
    with pytest.raises(render.RawStringInTemplate):
        env.from_string("{{ value }}").render(value="raw model name")
    assert env.from_string("{{ value | pyliteral }}").render(value="a'b") == names.py_str("a'b")


def test_bad_dtype_in_manifest_fails_rendering():
    m = hostile_manifest("x")
    m = dataclasses.replace(m, inputs=(TensorSig("x", "float32); import os #", (1,)),))
    with pytest.raises(TypeError):
        stubs.python_stub(m)
