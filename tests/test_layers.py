"""The layers hold: read every module's imports and fail on one that crosses them (docs/ARCHITECTURE.md).

Type-checking-only imports are left out; lazy imports inside functions count like any other.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mediaindex"
GROUND = {"config", "errors", "segments", "jobs", "raylib", "__init__", "__main__"}
# What each package may import besides itself and the ground floor.
ALLOWED = {
    "serving": set(),  # a library: only mediaindex.errors of the app
    "media": set(),
    "models": {"serving"},  # models that quantize through the engine's quantizer
    "index": {"models"},
    "search": {"models", "index"},  # ranking and the relevance decision over the index
    "agents": {"serving", "models", "index", "search"},  # the service passes in what starts Ray
    "pipeline": {"media", "models", "index", "agents"},  # the summary stage runs the summariser
    "workers": {"pipeline", "media", "models", "index"},  # Ray actors around the pipeline's stages
    "service": {"pipeline", "workers", "agents", "media", "models", "index", "search"},  # picks the executor
    # The faces reach Ray only through the service, which picks the executor and starts the language model.
    "api": {"mcp", "service", "pipeline", "agents", "media", "models", "index", "search", "serving"},  # mounts /mcp
    "mcp": {"service", "pipeline", "agents", "media", "models", "index", "search"},
    "cli": {"api", "mcp", "service", "pipeline", "agents", "media", "models", "index", "search"},
    "web": set(),
}


def _edges() -> dict[tuple[str, str], str]:
    edges: dict[tuple[str, str], str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        me = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        src = me.split(".")[1] if "." in me else "__init__"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"mediaindex.{a.name}" for a in node.names if node.module == "mediaindex"
                                         and (PACKAGE / a.name).with_suffix(".py").exists() | (PACKAGE / a.name).is_dir()]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "mediaindex" and len(parts) > 1 and parts[1] != src:
                    edges.setdefault((src, parts[1]), f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return edges


def test_every_package_imports_only_the_layers_below_it() -> None:
    bad = []
    for (src, dst), where in _edges().items():
        if src in {"__init__", "__main__"}:
            continue
        allowed = {"errors"} if src == "serving" else GROUND if src in GROUND else GROUND | ALLOWED.get(src, set())
        if dst not in allowed:
            bad.append(f"{src} -> {dst} ({where})")
    assert bad == []


def test_serving_uses_nothing_of_the_app_but_errors() -> None:
    assert [f"{d} ({w})" for (s, d), w in _edges().items() if s == "serving" and d != "errors"] == []


def test_no_two_packages_import_each_other() -> None:
    edges = _edges()
    nodes = sorted({n for edge in edges for n in edge})
    cycles = [f"{a} <-> {b} ({edges[(a, b)]}; {edges[(b, a)]})" for a, b in itertools.combinations(nodes, 2)
              if (a, b) in edges and (b, a) in edges]
    assert cycles == []


def test_only_the_service_imports_the_workers() -> None:
    """Ray's actors and executor are picked in one place: the service, under the faces."""
    assert sorted(f"{s} ({w})" for (s, d), w in _edges().items() if d == "workers" and s != "service") == []


def test_every_package_is_placed_in_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    assert packages - set(ALLOWED) - {"configs"} == set()
