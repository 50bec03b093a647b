"""The package reads as the pipeline: no import cycle, the build never imports the tooling, only
aot.lower touches the compiler, and the runtime stays deployable (numpy + iree.runtime)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import networkx as nx

from conftest import ROOT

PACKAGE = ROOT / "aot"
# The build stages and what they share; aot.api and aot.cli sit on top and may use the tooling.
STAGES = ("aot.frontend", "aot.partition", "aot.lower", "aot.bundle", "aot.runtime", "aot.checks",
          "aot.pipeline", "aot.options", "aot.workspace", "aot.errors", "aot.report", "aot.record")
# A bundle ships a copy of aot.runtime (stubs/python/aot_runtime): it may import only itself, and
# ml_dtypes, which runtime/dtypes.py imports only for a bundle with int4, float4, ... inputs or
# outputs (its stub then says it needs it).
RUNTIME_MAY_IMPORT = {"numpy", "iree.runtime", "aot.runtime", "ml_dtypes"}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: frozenset[str] = frozenset()) -> set[str]:
    """Every module ``path`` imports, at any depth, except under ``if TYPE_CHECKING:``.
    ``from pkg import sub`` where ``pkg.sub`` is one of ``modules`` imports the submodule, not
    the package's own names. Relative imports resolve against ``path``'s package."""
    tree = ast.parse(path.read_text())
    package = _module(path).split(".") if path.name == "__init__.py" else _module(path).split(".")[:-1]
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and getattr(node.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])]) \
                if node.level else node.module
            subs = {f"{base}.{a.name}" for a in node.names} & modules
            found |= subs
            if len(subs) < len(node.names):
                found.add(base)
    return found


def _graph() -> nx.DiGraph:
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    g = nx.DiGraph()
    for name, path in modules.items():
        g.add_node(name)
        for imported in _imports(path, frozenset(modules)):
            if imported in modules and imported != name:
                g.add_edge(name, imported)
    return g


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_import_graph_of_aot_has_no_cycle():
    g = _graph()
    assert len(g) > 30
    cycles = list(nx.simple_cycles(g))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_the_build_stages_never_import_the_models_or_the_tooling():
    g = _graph()
    bad = [(a, b) for a, b in g.edges if _within(a, STAGES) and _within(b, ("aot.tools", "aot.models"))]
    assert not bad
    # ... and the models really are used through the API, so the check can fail.
    assert g.has_edge("aot.api", "aot.models.zoo")


def test_only_the_cli_imports_the_developer_tools():
    """Benchmarks, conformance, fuzzing and profiling are developer tools: the CLI runs them (its
    tool subcommands live in aot/cli_tools.py); the library, the API and the models included,
    never imports them."""
    g = _graph()
    users = {a for a, b in g.edges if _within(b, ("aot.tools",)) and not _within(a, ("aot.tools",))}
    assert users == {"aot.cli_tools"}, users
    assert g.has_edge("aot.cli_tools", "aot.tools.bench") and g.has_edge("aot.cli", "aot.cli_tools")


def test_only_lower_and_the_torch_front_end_import_the_compiler():
    # The torch front end's input is MLIR (iree-turbine's export): it reads it with the compiler's
    # Python bindings. The ONNX front end, the partitioner, the bundle writer and the runtime never do.
    users = {_module(p) for p in PACKAGE.rglob("*.py") if any(m.startswith("iree.compiler") for m in _imports(p))}
    assert users and all(_within(u, ("aot.lower", "aot.frontend.torch")) for u in users), users
    assert any(_within(u, ("aot.lower",)) for u in users)


def test_only_the_torch_front_end_and_its_reference_import_torch():
    """Everything else builds ONNX models with torch absent (`pip install aot` does not pull it).
    The corpus's checkpoint exports import it inside their functions, when such a model is fetched."""
    users = {_module(p) for p in PACKAGE.rglob("*.py")
             if any(_within(m, ("torch", "iree.turbine")) for m in _imports(p))}
    assert users == {"aot.frontend.torch.export", "aot.frontend.torch.factory", "aot.frontend.torch.attention",
                     "aot.frontend.torch.decompose", "aot.checks.eager", "aot.models.checkpoints"}, users


def test_the_runtime_imports_only_numpy_iree_runtime_and_itself():
    seen = set()
    for path in (PACKAGE / "runtime").rglob("*.py"):
        outside = {m for m in _imports(path) if m.split(".")[0] not in sys.stdlib_module_names}
        assert outside == {m for m in outside if _within(m, RUNTIME_MAY_IMPORT)}, (path.name, outside)
        seen |= outside
    assert {"numpy", "iree.runtime", "aot.runtime.errors"} <= seen   # the check sees relative imports
    assert _within("onnx", RUNTIME_MAY_IMPORT) is False and _within("iree.compiler", RUNTIME_MAY_IMPORT) is False




# aot/runtime ships in every bundle: small modules, and none of the build's checking code in them.
RUNTIME_MAX_LINES = 400


def test_no_runtime_module_is_over_400_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PACKAGE / "runtime").glob("*.py")}
    assert "session.py" in sizes
    assert not {name: n for name, n in sizes.items() if n > RUNTIME_MAX_LINES}, sizes


def test_the_runtime_carries_no_profiling_or_per_region_runs():
    from aot import runtime
    from aot.checks.session import CheckSession

    shipped = [getattr(runtime, name) for name in runtime.__all__]
    build_only = ("profile", "run_region")
    assert not [(c.__name__, a) for c in shipped if isinstance(c, type) for a in build_only if hasattr(c, a)]
    # ... and no module of the runtime defines them; the build's CheckSession has them.
    defined = {n.name for p in (PACKAGE / "runtime").glob("*.py") for n in ast.walk(ast.parse(p.read_text()))
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert not defined & set(build_only)
    assert all(hasattr(CheckSession, a) for a in build_only) and issubclass(CheckSession, runtime.Session)

# Compiler knowledge has one owner: a flag spelled anywhere else drifts from the rules that pick it
# (and compile caches are keyed on the flags).
FLAG_OWNER = PACKAGE / "lower" / "flags.py"
COMPILER_FLAG = ("--iree-", "--compile-to")


def _flag_literals(path: Path) -> list[str]:
    """String constants that spell an iree-compile flag, the literal parts of f-strings included."""
    return [n.value for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(COMPILER_FLAG)]


def test_only_lower_flags_spells_an_iree_compile_flag():
    spelled = {str(p.relative_to(ROOT)): found for p in PACKAGE.rglob("*.py")
               if p != FLAG_OWNER and (found := _flag_literals(p))}
    assert not spelled, spelled
    # The check sees the owner's spellings, f-string parts ("--iree-cuda-target=") and phases included.
    owned = _flag_literals(FLAG_OWNER)
    assert "--iree-cuda-target=" in owned and "--compile-to=vm" in owned and len(owned) > 20

# The product's brief names these top-level entries.
BRIEF_TOP_LEVEL = ("pyproject.toml", "Makefile", "README.md", "aot", "templates", "tests", "artifacts")


def test_the_top_level_is_the_briefs():
    assert all((ROOT / name).exists() for name in BRIEF_TOP_LEVEL)
    templates = list((ROOT / "templates").rglob("*.j2"))
    assert {p.parent.name for p in templates} >= {"c", "python"}
    # installed as aot/templates, never an import package of its own, and nowhere else in the tree
    assert not (ROOT / "templates" / "__init__.py").exists() and not list(PACKAGE.rglob("*.j2"))


def test_every_package_is_listed_for_the_wheel():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {_module(p.parent / "__init__.py") for p in PACKAGE.rglob("__init__.py")}
    assert set(config["packages"]) == packages | {"aot.templates"}
    assert config["package-dir"] == {"aot.templates": "templates"}
    from aot.bundle import render

    assert render.TEMPLATES == ROOT / "templates"


def _hand_rolled_timings(tree: ast.AST) -> list[int]:
    """Lines where a loop appends a clock difference to a list: a hand-rolled benchmark."""
    def clock_read(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr in {"perf_counter", "perf_counter_ns", "time"}
                   and getattr(n.value, "id", None) == "time" for n in ast.walk(node))

    return [call.lineno for loop in ast.walk(tree) if isinstance(loop, (ast.For, ast.While))
            for call in ast.walk(loop) if isinstance(call, ast.Call)
            and getattr(call.func, "attr", None) == "append" and any(clock_read(a) for a in call.args)]


def test_one_timing_harness_every_repeated_measurement_goes_through_checks_timing():
    """Repeated measurements belong in aot/checks/timing.py, where idling, settling, interleaving
    and medians are decided once. (Deadlines and a build's one-off durations read the clock too;
    they append nothing.)"""
    found = {str(p.relative_to(ROOT)): lines for p in PACKAGE.rglob("*.py")
             if (lines := _hand_rolled_timings(ast.parse(p.read_text())))}
    assert not found, found
    # The scan can fail: the loop the tuner's probe had before the harness existed.
    old_probe = ("for i in range(9):\n    start = time.perf_counter()\n    f()\n"
                 "    samples.append((time.perf_counter() - start) * 1e6)\n")
    assert _hand_rolled_timings(ast.parse(old_probe)) == [4]


# One comparison: aot/checks/compare.py decides when arrays are close (NaN and signed Inf matched
# element by element). numpy's allclose/isclose take NaN as unequal by default and assert_allclose
# as equal; a hand-rolled max(abs(a - b)) drops NaN or turns it into a pass (`nan > tol` is False).
COMPARE_OWNER = PACKAGE / "checks" / "compare.py"
COMPARE_EXEMPT = {COMPARE_OWNER, ROOT / "tests" / "test_layout.py"}
_NUMPY_CLOSE = ("allclose", "assert_allclose", "isclose", "assert_array_almost_equal", "assert_almost_equal")
_ABS = {"abs", "absolute", "fabs"}
_MAX = {"max", "nanmax", "amax"}


def _name(node: ast.AST) -> str:
    """The last part of a called name: ``np.testing.assert_allclose`` -> ``assert_allclose``."""
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _hand_rolled_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, what) for each numpy closeness call and each max(...) over abs(x - y)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        if name in _NUMPY_CLOSE:
            found.append((node.lineno, name))
        elif name in _MAX:
            # max(abs(a - b)), np.max(np.abs(a - b)) and np.abs(a - b).max(): the max's operand or receiver.
            under = [*node.args, *([node.func.value] if isinstance(node.func, ast.Attribute) else [])]
            if any(isinstance(n, ast.Call) and _name(n.func) in _ABS and n.args and isinstance(n.args[0], ast.BinOp)
                   and isinstance(n.args[0].op, ast.Sub) for u in under for n in ast.walk(u)):
                found.append((node.lineno, "max(abs(a - b))"))
    return found


def test_the_scan_for_hand_rolled_comparisons_finds_each_kind():
    snippets = ["np.allclose(a, b)", "np.testing.assert_allclose(a, b)", "math.isclose(a, b)",
                "float(np.abs(a - b).max())", "max(abs(x - y) for x, y in pairs)", "np.nanmax(np.abs(a - b))",
                "max(float(np.max(np.abs(a - b), initial=0.0)) for a, b in z)"]
    assert all(_hand_rolled_comparisons(s) for s in snippets)
    assert not _hand_rolled_comparisons("abs(depth[a] - depth[b]) == 1\nmax(abs(lo), abs(hi))\ncompare(a, b).ok")


def test_arrays_are_compared_only_through_checks_compare():
    files = [p for p in (*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "scripts").rglob("*.py"))
             if p not in COMPARE_EXEMPT and "golden" not in p.parts]   # goldens are masked text, not Python
    assert len(files) > 100
    bad = {str(p.relative_to(ROOT)): hits for p in files if (hits := _hand_rolled_comparisons(p.read_text()))}
    assert not bad, f"compare arrays with aot.checks.compare (compare / assert_close / within): {bad}"
