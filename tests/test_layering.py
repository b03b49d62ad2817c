"""The import graph is one-way (docs/architecture.md): read from the source with `ast`.

- no cycle among simulator modules, counting every import: module-level, inside a function and
  under `if TYPE_CHECKING:` (an annotation-only cycle still ties two modules together);
- the layer check below follows runtime imports only (an annotation may name a higher layer's type);
- simpy only in the engine (`simulator/engine.py` or a `simulator/engine/` package);
- argparse, print() and sys.stdout only in the command line (`simulator/cli/`, `__main__`);
- the library never imports its front doors (`simulator.cli`, the `mfusim` API package).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import pytest

import simulator

PACKAGE_DIR = Path(simulator.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except the bodies of `if TYPE_CHECKING:` blocks."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) not in skip:
            yield node


def imported_names(name: str, annotations: bool = False) -> set[str]:
    """Absolute names of what module `name` imports (a submodule when `from pkg import sub`).

    Runtime imports only, unless `annotations`: then also those under `if TYPE_CHECKING:`.
    """
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    here = name.split(".") if _is_package(name) else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree) if annotations else _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in MODULES else target)
    return out


def import_graph(annotations: bool = False) -> nx.DiGraph:
    graph = nx.DiGraph()
    for name in MODULES:
        graph.add_node(name)
        for target in imported_names(name, annotations):
            if target in MODULES and target != name:
                graph.add_edge(name, target)
    return graph


def _is_cli(name: str) -> bool:
    """The command line: simulator/cli/ and `python -m simulator` (simulator/__main__.py)."""
    return name in ("simulator.cli", "simulator.__main__") or name.startswith("simulator.cli.")


def _is_engine(name: str) -> bool:
    return name == "simulator.engine" or name.startswith("simulator.engine.")


def test_the_reader_finds_the_packages() -> None:
    # the checks below are only as good as the module list: it must see every layer
    for expected in ("simulator.cli.app", "simulator.network.model", "simulator.engine", "simulator.flops"):
        assert expected in MODULES, expected
    assert "simulator.network.model" in imported_names("simulator.network")
    assert import_graph().number_of_edges() > len(MODULES)


def test_the_reader_sees_annotation_imports() -> None:
    # the cycle check counts `if TYPE_CHECKING:` imports: the reader must find them, and they
    # must add to (never replace) the runtime edges
    runtime, every = import_graph(), import_graph(annotations=True)
    assert set(runtime.edges()) < set(every.edges())


def test_no_import_cycles() -> None:
    graph = import_graph(annotations=True)
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert cycles == [], f"import cycles among {cycles}; see docs/architecture.md for who may import whom"


def test_the_library_never_imports_the_command_line() -> None:
    offenders = {
        name: sorted(t for t in imported_names(name) if _is_cli(t) or t.split(".")[0] == "mfusim")
        for name in MODULES
        if not _is_cli(name)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_simpy_only_in_the_engine() -> None:
    users = sorted(name for name in MODULES if any(t.split(".")[0] == "simpy" for t in imported_names(name)))
    assert users, "no module imports simpy: is the engine still a discrete-event simulation?"
    assert [u for u in users if not _is_engine(u)] == []


def _library_output(name: str) -> list[str]:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"print() at line {node.lineno}")
        elif isinstance(node, ast.Attribute) and node.attr == "stdout" and ast.unparse(node.value) == "sys":
            found.append(f"sys.stdout at line {node.lineno}")
    if any(t.split(".")[0] == "argparse" for t in imported_names(name)):
        found.append("imports argparse")
    return found


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not _is_cli(n)))
def test_library_modules_neither_parse_flags_nor_print(name: str) -> None:
    assert _library_output(name) == []


def test_the_output_check_sees_a_print() -> None:
    # the CLI prints: the same check must find it there, or it proves nothing elsewhere
    assert any(_library_output(n) for n in MODULES if _is_cli(n))


def test_the_command_line_starts_without_the_simulator() -> None:
    # `mfusim --help` and a one-line usage error must not load simpy, networkx or matplotlib:
    # each command imports what it needs when it runs
    code = (
        "import sys, simulator.cli; "
        "print(','.join(m for m in ('simpy', 'networkx', 'matplotlib', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# The layers of docs/architecture.md, bottom up, by top-level module or package of simulator/.
# A module may import its own layer or lower ones (runtime imports), never a higher one.
# A module not listed counts as an analysis (layer 6): add a new low-level module here.
LAYERS: dict[str, int] = {
    **dict.fromkeys(
        (
            "",
            "units",
            "errors",
            "argcheck",
            "resources",
            "console",
            "names",
            "timeline",
            "progress",
            "outputs",
        ),
        0,
    ),
    **dict.fromkeys(("specs", "schedules", "routing_skew", "flops", "plan"), 1),
    **dict.fromkeys(("loading", "overrides"), 2),
    **dict.fromkeys(
        (
            "memory",
            "costs",
            "kernels",
            "kernel_catalog",
            "clocks",
            "gpu_spread",
            "stacks",
            "network",
            "comm",
            "hostbound",
            "ep_dispatch",
        ),
        3,
    ),
    "program": 4,
    **dict.fromkeys(("engine", "analytic", "metrics", "simulate"), 5),
    **dict.fromkeys(
        ("run", "trace", "plots", "whatif", "sweep", "validate", "compare", "export", "describe"), 6
    ),
    **dict.fromkeys(("cli", "__main__"), 7),
}
LAYER_NAMES = (
    "foundations",
    "descriptions and pure counts",
    "loading",
    "cost models",
    "costed program",
    "simulation",
    "analyses",
    "command line",
)


def layer_of(name: str) -> int:
    parts = name.split(".")
    return LAYERS.get(parts[1] if len(parts) > 1 else "", 6)


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{a} ({LAYER_NAMES[layer_of(a)]}) imports {b} ({LAYER_NAMES[layer_of(b)]})"
        for a, b in import_graph().edges()
        if layer_of(b) > layer_of(a)
    ]
    assert upward == [], "see docs/architecture.md"


def test_the_layer_map_names_real_modules() -> None:
    tops = {n.split(".")[1] if n.count(".") else "" for n in MODULES}
    assert set(LAYERS) - tops == set()


def test_no_global_plotting_state() -> None:
    # pictures are drawn on their own Agg canvas (simulator/plots.py): pyplot and
    # matplotlib.use() change process-wide state, which a library must not do
    offenders = sorted(
        name
        for name in MODULES
        if "matplotlib.pyplot" in imported_names(name)
        or "matplotlib.use(" in MODULES[name].read_text(encoding="utf-8")
    )
    assert offenders == []
