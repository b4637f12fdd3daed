"""The package's shape, read from its source with ``ast`` (nothing is imported):

* the harness never imports a family module — the catalogue of shipped
  families belongs to ``matprobe.kernels``, and the harness (the measurement
  core ``measure/``, the run side and the report side) knows a registry only as
  a factory string;
* the import graph of ``matprobe.*`` has no cycle, module-level imports or
  any other (inside functions, under ``TYPE_CHECKING``);
* the folders of the loop keep their boundaries: ``profile/`` (reading
  profiles) imports only the shared core; the measurement core (``measure/``)
  nothing of the stages around it; ``report/`` reads results and never reaches
  into the measurement core beyond what a result, a device, a timing policy and
  a variant are, nor into the run side beyond the plan and the store (calls per
  token are the profile side's); of ``run/``, only the session (a run from specs
  to its report) imports ``report/``; and only the entry points (``python -m
  matprobe``) import ``cli/``;
* rooms stay small enough to read: no module over 500 lines, no function over
  80 outside Triton kernels and a command's argument table, no folder over a
  fifth of the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import python_c

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "matprobe"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run when the module is imported: the body, and the
    bodies of top-level ``if``/``try``/``with`` (not ``if TYPE_CHECKING:``, not
    functions or classes' methods)."""
    found: list[ast.stmt] = []
    for node in body:
        found.append(node)
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += _top_level(node.body)
            found += _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                found += _top_level(block)
            for handler in node.handlers:
                found += _top_level(handler.body)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            found += _top_level(node.body)
    return found


def _targets(node: ast.stmt, module: str) -> set[str]:
    """The ``matprobe`` modules an import statement imports (``from p import n``
    names module ``p.n`` when it is one, else ``p``)."""
    names: set[str] = set()
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            here = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
            parts = here.split(".")[: len(here.split(".")) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        names = {
            f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
            for alias in node.names
        }
    found = set()
    for name in names:
        while name and name not in MODULES:  # ``import matprobe.x.y`` of a non-module attr
            name = name.rpartition(".")[0]
        if name.startswith("matprobe") and name != module:
            found.add(name)
    return found


def import_graph(*, module_level_only: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        nodes = _top_level(tree.body) if module_level_only else list(ast.walk(tree))
        graph[module] = set()
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module] |= _targets(node, module)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_is_read() -> None:
    """Guards the other tests against passing on an empty graph."""
    graph = import_graph(module_level_only=True)
    assert "matprobe.run.session" in graph and "matprobe.kernels.catalogue" in graph
    assert "matprobe.measure.variants" in graph["matprobe.kernels.catalogue"]
    assert "matprobe.kernels.triton.gemv" in graph["matprobe.kernels.catalogue"]
    assert "matprobe.run.runner" in graph["matprobe.run.session"]
    everywhere = import_graph(module_level_only=False)
    assert "matprobe.run.session" in everywhere["matprobe.cli.run"]  # imported in cmd_run


#: The packages of the harness: the measurement core, the run side, the report side.
HARNESS = ("matprobe.measure", "matprobe.run", "matprobe.report")


def test_the_harness_imports_no_family_module() -> None:
    graph = import_graph(module_level_only=False)  # function-level imports included
    offenders = {
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module.startswith(HARNESS)
        for target in targets
        if target == "matprobe.kernels" or target.startswith("matprobe.kernels.")
    }
    assert not offenders
    importers = {m for m, targets in graph.items() if "matprobe.kernels.catalogue" in targets}
    assert not {m for m in importers if m.startswith(HARNESS)}


@pytest.mark.parametrize("module_level_only", [True, False])
def test_the_import_graph_has_no_cycle(module_level_only: bool) -> None:
    """Not even through an import inside a function (``runner`` → ``ray_pool`` →
    ``stored_report`` → ``report`` → ``runner`` was one, by a device decoder the
    pool took from the report layer; ``inputs`` ↔ ``validate`` another)."""
    cycle = _cycle(import_graph(module_level_only=module_level_only))
    assert cycle is None, " -> ".join(cycle or [])


#: The shared core every stage may use: the spec and what it is built from.
SHARED_CORE = {
    "matprobe",
    "matprobe.errors",
    "matprobe.quant",
    "matprobe.quiet_profiler",
    "matprobe.safetext",
    "matprobe.spec",
    "matprobe.stats",
}


def _reaching(graph: dict[str, set[str]], package: str, allowed: set[str]) -> set[str]:
    """``module imports target`` for every import of ``package``'s modules that
    leaves the package for a module outside ``allowed`` (a name or a package prefix)."""
    inside = (package, f"{package}.")
    return {
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module.startswith(inside)
        for target in targets
        if not target.startswith(inside)
        and not any(target == a or target.startswith(f"{a}.") for a in allowed - {"matprobe"})
        and target != "matprobe"
    }


def test_the_profile_side_imports_only_the_shared_core() -> None:
    """Reading a profile needs no harness, runner, report or family: ``profile/``
    imports ``spec``, ``stats``, ``errors``, ``safetext`` and itself."""
    graph = import_graph(module_level_only=False)
    assert any(m.startswith("matprobe.profile.") for m in graph)
    assert not _reaching(graph, "matprobe.profile", SHARED_CORE)


def test_the_measurement_core_imports_none_of_the_stages_around_it() -> None:
    """``measure/`` judges one pair: it knows no profile, run, report, command,
    dispatch table, decode step or family."""
    graph = import_graph(module_level_only=False)
    assert not _reaching(graph, "matprobe.measure", SHARED_CORE)


#: What ``report/`` may know of the measurement core: what a result, a device, a
#: timing policy and a variant are — never how a pair is built, judged or timed;
#: of the run side: the plan and its outcome, the store — never a worker, an
#: executor or the session; of the profile side: calls per token.
REPORT_SEES = {
    "matprobe.measure.results",
    "matprobe.measure.device",
    "matprobe.measure.timing",
    "matprobe.measure.variants",
    "matprobe.run.runner",
    "matprobe.run.store",
    "matprobe.profile.per_token",
}


def test_the_report_side_reads_results_and_never_measures() -> None:
    graph = import_graph(module_level_only=False)
    assert any(m.startswith("matprobe.report.") for m in graph)
    assert not _reaching(graph, "matprobe.report", SHARED_CORE | REPORT_SEES)


def test_of_the_run_side_only_the_session_imports_the_report_side() -> None:
    """A run measures and stores; the session, which takes chosen specs to a
    report, is the one module of ``run/`` that asks ``report/`` for it."""
    graph = import_graph(module_level_only=False)
    importers = {
        module
        for module, targets in graph.items()
        if module.startswith("matprobe.run")
        and any(t.startswith("matprobe.report") for t in targets)
    }
    assert importers == {"matprobe.run.session"}
    everywhere = set(SHARED_CORE) | {"matprobe.measure", "matprobe.report"}
    assert not _reaching(graph, "matprobe.run", everywhere)  # no profile, cli, token...


def test_only_the_entry_points_import_the_command_line() -> None:
    """``cli/`` is the top: one module per subcommand, over the library; nothing
    of the library imports it back."""
    graph = import_graph(module_level_only=False)
    assert {"matprobe.cli.run", "matprobe.cli.reports"} <= graph["matprobe.cli"]
    importers = {
        module
        for module, targets in graph.items()
        if module != "matprobe.cli"
        and not module.startswith("matprobe.cli.")
        and any(t == "matprobe.cli" or t.startswith("matprobe.cli.") for t in targets)
    }
    assert importers == {"matprobe.__main__"}


def test_the_triton_families_and_the_peers_keep_to_their_folders() -> None:
    """``kernels/triton/`` imports no peer; a peer takes of ``kernels/triton/`` only
    the shared operand checks (``_common``, named in its fingerprint's ``sources``),
    never a Triton family or its kernels; the catalogue is imported by no family."""
    graph = import_graph(module_level_only=False)
    triton = {m for m in graph if m.startswith("matprobe.kernels.triton.")}
    peers = {m for m in graph if m.startswith("matprobe.kernels.peers.")}
    assert len(triton) >= 20 and len(peers) >= 5
    assert not {f"{m} imports {t}" for m in triton for t in graph[m] if t in peers}
    crossing = {t for m in peers for t in graph[m] if t in triton}
    assert crossing <= {"matprobe.kernels.triton._common"}
    for module in peers:
        if "matprobe.kernels.triton._common" in graph[module]:
            assert "sources=(common,)" in MODULES[module].read_text(encoding="utf-8"), module
    assert not {m for m in triton | peers if "matprobe.kernels.catalogue" in graph[m]}


#: Longest module and function (issue 22). A Triton kernel's body is one launch's
#: whole program, and a subcommand's argument table (``register``) one declaration
#: per option: neither reads better cut in two.
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _long_functions(tree: ast.Module) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        kernel = any("jit" in ast.unparse(d) for d in node.decorator_list)
        if lines > MAX_FUNCTION_LINES and not kernel and node.name != "register":
            found.append((node.name, lines))
    return found


def test_no_module_or_function_outgrows_a_reading() -> None:
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(SRC)
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        too_long += [f"{name}:{fn}: {n} lines" for fn, n in _long_functions(ast.parse(text))]
    assert too_long == []


#: The largest share of the source one folder of the package may hold (issue 22:
#: ``harness/`` once held 39 %, and no newcomer could see the stages in it).
MAX_FOLDER_SHARE = 0.20


def test_no_folder_holds_more_than_a_fifth_of_the_source() -> None:
    lines: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        room = parts[0] if len(parts) > 1 else path.name
        lines[room] = lines.get(room, 0) + len(path.read_text(encoding="utf-8").splitlines())
    total = sum(lines.values())
    assert {room: n for room, n in lines.items() if n > MAX_FOLDER_SHARE * total} == {}


def test_the_length_rule_sees_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    tree = ast.parse(f"def long():\n{body}\n\n@triton.jit\ndef kernel():\n{body}\n")
    assert _long_functions(tree) == [("long", MAX_FUNCTION_LINES + 1)]


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_importing_the_harness_loads_no_family_module() -> None:
    """The same at run time: every harness module imported, no family module loaded
    (the registry is built from a factory string, where it is needed)."""
    harness = sorted(m for m in MODULES if m.startswith(tuple(f"{p}." for p in HARNESS)))
    code = "\n".join(
        [
            "import importlib, sys",
            f"for name in {harness!r}: importlib.import_module(name)",
            "loaded = sorted(m for m in sys.modules if m.startswith('matprobe.kernels'))",
            "assert not loaded, loaded",
        ]
    )
    python_c(code)


def test_the_catalogue_imports_without_torch_triton_or_mlx() -> None:
    """Listing the shipped families needs none of the libraries they run on."""
    code = "\n".join(
        [
            "import sys",
            "for name in ('torch', 'triton', 'mlx', 'mlx.core'): sys.modules[name] = None",
            "from matprobe.kernels.catalogue import SHIPPED_MODULES, shipped_registry",
            "registry = shipped_registry()",
            "assert len(registry.names()) >= len(SHIPPED_MODULES), registry.names()",
            "print(' '.join(SHIPPED_MODULES))",
        ]
    )
    printed = python_c(code)
    shipped = {
        _module_name(p).removeprefix("matprobe.kernels.")
        for p in (PACKAGE / "kernels").glob("*/*.py")
        if not p.stem.startswith("_")
    }
    assert {"triton.gemv", "peers.torch_ref"} <= shipped
    assert set(printed.split()) == shipped  # every family module is in the catalogue


KERNEL_MODULES = sorted(
    name
    for name in MODULES
    if name.startswith("matprobe.kernels.triton._") and name.endswith("_kernels")
)
BLOCKS = "matprobe.kernels.triton._blocks"


def _jit_functions(path: Path) -> list[ast.FunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node for node in tree.body if isinstance(node, ast.FunctionDef)]


def test_every_kernel_module_stores_through_the_shared_epilogue() -> None:
    """One epilogue (alpha·acc + beta·C0 + bias in fp32, one cast): every family's
    kernels import it from the blocks module, and no kernel stores an output
    after scaling by alpha itself — a second copy would drift from the reference's order."""
    assert len(KERNEL_MODULES) >= 6
    for name in KERNEL_MODULES:
        text = MODULES[name].read_text(encoding="utf-8")
        assert f"from {BLOCKS} import" in text, name
        assert "* alpha" not in text, f"{name} applies alpha itself"


def test_the_split_k_finish_is_written_once() -> None:
    """The last-arriving program (barrier, acq_rel counter) and the read-and-zero
    of a workspace live only in the blocks module; kernels call them."""
    for name in KERNEL_MODULES:
        text = MODULES[name].read_text(encoding="utf-8")
        assert 'sem="acq_rel"' not in text, f"{name} counts arrivals itself"
        assert "tl.zeros_like(total)" not in text, f"{name} zeroes a workspace itself"
    blocks = {f.name for f in _jit_functions(MODULES[BLOCKS])}
    assert {"epilogue_terms", "store_out", "epilogue_store", "arrive_last", "take_sums"} <= blocks


def test_family_constants_are_defined_once() -> None:
    """Grid limits, the default SM count and element sizes have one home."""
    for constant in ("MAX_GRID_YZ", "DEFAULT_SM_COUNT", "DEFAULT_SMS", "ELEMENT_BYTES"):
        homes = [
            name
            for name, path in MODULES.items()
            if name.startswith("matprobe.kernels")
            and any(
                isinstance(node, ast.Assign | ast.AnnAssign)
                and any(
                    isinstance(t, ast.Name) and t.id == constant
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                )
                for node in ast.parse(path.read_text(encoding="utf-8")).body
            )
        ]
        assert len(homes) <= 1, f"{constant} defined in {homes}"


# ---- the shared row-block set-up ------------------------------------------------------------

ROW_BLOCKED = ("_gemv_q8_kernels", "_gemv_swiglu_kernels",
               "_decode_kernels")  # fmt: skip


@pytest.mark.parametrize("name", ROW_BLOCKED)
def test_the_row_blocked_gemv_kernels_share_their_set_up(name: str) -> None:
    """Program ids, int64 bases, offs_n/mask_n and the row pointers come from
    ``kernels/triton/_blocks`` (``row_block``, ``row_ptrs``), not from a copy in each kernel."""
    text = MODULES[f"matprobe.kernels.triton.{name}"].read_text(encoding="utf-8")
    assert "row_block(" in text and "row_ptrs(" in text
    assert "tl.program_id(" not in text, f"{name} sets up its row block itself"
    assert "def silu_mul" not in text, f"{name} defines its own silu_mul"


def test_the_old_input_path_still_imports_the_input_set() -> None:
    """Scripts written before the restructure (the independent decode step's table
    mode) import ``matprobe.harness.inputs.MatmulInputs``: the same class."""
    from matprobe.harness.inputs import MatmulInputs as OldPath
    from matprobe.measure.inputs import MatmulInputs

    assert OldPath is MatmulInputs
