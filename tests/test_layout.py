"""The workspace layout holds: each member builds a wheel of its own import package only, with one
version and one license; the SDK imports no other member; no member has an import cycle; the
``agentrt`` command finds every member's commands and names the distribution of an absent one.

The layout is described in docs/architecture.md.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from agentrt import cli

ROOT = Path(__file__).resolve().parents[1]

#: member folder -> (distribution, import package, the ``agentrt`` commands it provides).
MEMBERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "agentrt": ("agentrt", "agentrt", ("journal",)),
    "serving": ("agentrt-serving", "agentrt_serving", ()),
    "controller": ("agentrt-controller", "agentrt_controller", ("controller",)),
    "emulator": ("agentrt-emulator", "agentrt_emulator", ("engine",)),
    "simulator": ("agentrt-sim", "agentrt_sim", ("bench", "trace")),
    "adapters": ("agentrt-adapters", "agentrt_adapters", ()),
    "demo": ("agentrt-demo", "agentrt_demo", ("demo", "timeline")),
}
#: member folder -> its ``agentrt.commands`` entry points (name -> target), if it has any.
ENTRY_POINTS: dict[str, dict[str, str]] = {
    "agentrt": {"journal": "agentrt.journal.cli:register"},
    "controller": {"controller": "agentrt_controller.cli:register"},
    "emulator": {"engine": "agentrt_emulator.cli:register"},
    "simulator": {
        "bench": "agentrt_sim.cli:register",
        "trace": "agentrt_sim.export.cli:register",
    },
    "demo": {"demo": "agentrt_demo.cli:register"},
}
DISTRIBUTIONS = {dist for dist, _, _ in MEMBERS.values()}
OTHER_PACKAGES = {package for _, package, _ in MEMBERS.values()} - {"agentrt"}


def _version_source() -> str:
    text = (ROOT / "agentrt" / "agentrt" / "_version.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    assert match, "agentrt/agentrt/_version.py has no __version__"
    return match.group(1)


def _pyproject(folder: str) -> dict[str, object]:
    with (ROOT / folder / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def _project(folder: str) -> dict[str, object]:
    project = _pyproject(folder)["project"]
    assert isinstance(project, dict)
    return project


def _license_text() -> str:
    return (ROOT / "LICENSE").read_text(encoding="utf-8")


# --- b. pins and license metadata -------------------------------------------------------------


def test_the_root_license_is_apache() -> None:
    text = _license_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_every_member_is_listed_and_named_as_expected() -> None:
    folders = {p.parent.name for p in ROOT.glob("*/pyproject.toml")}
    assert folders == set(MEMBERS), folders ^ set(MEMBERS)
    for folder, (dist, package, _) in MEMBERS.items():
        assert _project(folder)["name"] == dist
        assert (ROOT / folder / package / "__init__.py").is_file(), (folder, package)


def test_members_pin_each_other_to_the_version_source() -> None:
    version = _version_source()
    pins = 0
    for folder in MEMBERS:
        project = _project(folder)
        requirements = list(project.get("dependencies", []))  # type: ignore[call-overload]
        extras = project.get("optional-dependencies", {})
        assert isinstance(extras, dict)
        for group in extras.values():
            requirements.extend(group)
        for line in requirements:
            requirement = Requirement(line)
            if requirement.name not in DISTRIBUTIONS:
                continue
            pins += 1
            assert str(requirement.specifier) == f"=={version}", (folder, line, version)
        hatch_version = _pyproject(folder)["tool"]["hatch"]["version"]  # type: ignore[index]
        source = (ROOT / folder / hatch_version["path"]).resolve()
        assert source == ROOT / "agentrt" / "agentrt" / "_version.py", (folder, source)
        assert project.get("dynamic") == ["version"], folder
    assert pins >= 5


def test_every_member_declares_the_same_license() -> None:
    for folder in MEMBERS:
        project = _project(folder)
        assert project["license"] == "Apache-2.0", folder
        assert project["license-files"] == ["LICENSE"], folder
        license_file = ROOT / folder / "LICENSE"
        assert license_file.read_text(encoding="utf-8") == _license_text(), folder


# --- a. the wheels ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One freshly built wheel per member folder."""
    out = tmp_path_factory.mktemp("wheels")
    built: dict[str, Path] = {}
    for folder, (dist, _, _) in MEMBERS.items():
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "--wheel-dir",
                str(out),
                str(ROOT / folder),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        stem = dist.replace("-", "_")
        found = sorted(out.glob(f"{stem}-*.whl"))
        assert len(found) == 1, found
        built[folder] = found[0]
    return built


def _dist_info(names: list[str]) -> str:
    infos = {
        name.split("/", 1)[0] for name in names if name.split("/", 1)[0].endswith(".dist-info")
    }
    assert len(infos) == 1, infos
    return infos.pop()


@pytest.mark.slow
@pytest.mark.parametrize("folder", list(MEMBERS))
def test_wheel_holds_only_its_package(wheels: dict[str, Path], folder: str) -> None:
    dist, package, _ = MEMBERS[folder]
    version = _version_source()
    with zipfile.ZipFile(wheels[folder]) as wheel:
        names = wheel.namelist()
    top = {name.split("/", 1)[0] for name in names}
    info = f"{dist.replace('-', '_')}-{version}.dist-info"
    assert top == {package, info}, top
    assert f"{package}/__init__.py" in names


@pytest.mark.slow
@pytest.mark.parametrize("folder", list(MEMBERS))
def test_wheel_metadata(wheels: dict[str, Path], folder: str) -> None:
    dist, _, _ = MEMBERS[folder]
    with zipfile.ZipFile(wheels[folder]) as wheel:
        info = _dist_info(wheel.namelist())
        meta = wheel.read(f"{info}/METADATA").decode()
        headers = meta.split("\n\n", 1)[0].splitlines()
        assert f"Name: {dist}" in headers
        assert f"Version: {_version_source()}" in headers
        assert "License-Expression: Apache-2.0" in headers
        license_files = [h.split(": ", 1)[1] for h in headers if h.startswith("License-File: ")]
        assert license_files == ["LICENSE"], license_files
        text = wheel.read(f"{info}/licenses/LICENSE").decode()
        assert text == _license_text()


@pytest.mark.slow
@pytest.mark.parametrize("folder", list(MEMBERS))
def test_wheel_entry_points(wheels: dict[str, Path], folder: str) -> None:
    with zipfile.ZipFile(wheels[folder]) as wheel:
        info = _dist_info(wheel.namelist())
        path = f"{info}/entry_points.txt"
        raw = wheel.read(path).decode() if path in wheel.namelist() else ""
    groups = _entry_point_groups(raw)
    registered = groups.get(cli.COMMAND_GROUP, {})
    expected = ENTRY_POINTS.get(folder, {})
    assert registered == expected
    if folder == "agentrt":
        assert groups["console_scripts"] == {"agentrt": "agentrt.cli:main"}
    else:
        assert "console_scripts" not in groups, groups


def _entry_point_groups(raw: str) -> dict[str, dict[str, str]]:
    groups: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in raw.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("["):
            current = groups.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, raw
        name, _, target = line.partition("=")
        current[name.strip()] = target.strip()
    return groups


# --- c. the import graph ------------------------------------------------------------------------


def _modules(package_dir: Path) -> dict[str, Path]:
    """Every module of the package in ``package_dir``: dotted name -> file."""
    found: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node that can run at import or call time: skips what only type checkers see (the
    body of ``if TYPE_CHECKING:``, the ``else`` of ``if not TYPE_CHECKING:``)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.UnaryOp)
            and isinstance(node.test.op, ast.Not)
            and _is_type_checking(node.test.operand)
        ):
            stack.extend(node.body)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imports(module: str, path: Path, known: set[str]) -> Iterator[str]:
    """The modules ``module`` imports (absolute names): import statements, those only type
    checkers see (``if TYPE_CHECKING:``) included, since a cycle there still ties the modules
    together; constant names passed to ``importlib.import_module``; and the module names of a
    lazy export map (a dict literal whose values name modules, as ``agentrt._lazy.exports``
    takes)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[: -(node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                assert node.module is not None
                base = node.module
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield candidate if candidate in known else base
        elif (
            isinstance(node, ast.Call)
            and _call_name(node.func) in {"import_module", "importlib.import_module"}
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            name = node.args[0].value
            if name.startswith("."):
                level = len(name) - len(name.lstrip("."))
                base_parts = package.split(".")[: len(package.split(".")) - (level - 1)]
                name = ".".join([*base_parts, name.lstrip(".")]).rstrip(".")
            yield name
        elif isinstance(node, ast.Dict):
            for value in node.values:
                if isinstance(value, ast.Constant) and value.value in known:
                    yield value.value


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return ""


def _graph(package_dir: Path) -> dict[str, set[str]]:
    """Import edges from each module of the package (targets may lie outside it)."""
    modules = _modules(package_dir)
    known = set(modules)
    return {name: set(_imports(name, path, known)) - {name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (first node repeated at the end) per strongly connected component with one."""
    inside = {node: {t for t in targets if t in graph} for node, targets in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(inside[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(inside):
        if node not in index:
            connect(node)
    return [_a_cycle(component, inside) for component in components]


def _a_cycle(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest cycle through the component's first module (breadth-first search)."""
    start = component[0]
    members = set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle in {component}")  # pragma: no cover


def _format(cycles: list[list[str]], graph: dict[str, set[str]]) -> str:
    """One line per cycle; when more modules import each other, they are listed too."""
    lines = []
    for cycle in cycles:
        line = " -> ".join(cycle)
        onward = _reachable(cycle[0], graph)
        group = sorted(n for n in onward if cycle[0] in _reachable(n, graph))
        if len(group) > len(cycle) - 1:
            line += f"  ({len(group)} modules import each other: {', '.join(group)})"
        lines.append(line)
    return "\n".join(lines)


def _reachable(start: str, graph: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for target in graph[stack.pop()]:
            if target in graph and target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c", "x"}, "c": {"a"}, "d": {"d", "a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    graph["c"].add("b")
    assert _format(_cycles(graph), graph) == "a -> b -> c -> a"
    graph["b"] = {"c", "y"}
    graph["y"] = {"b"}
    assert _format(_cycles(graph), graph) == (
        "a -> b -> c -> a  (4 modules import each other: a, b, c, y)"
    )


def test_the_import_walker(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from pkg import mod\nfrom pkg import name\n"
        "import typing\nif not typing.TYPE_CHECKING:\n    LAZY = {'x': 'pkg.shown'}\n"
        "else:\n    import pkg.hidden\n"
    )
    (package / "mod.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import pkg.hidden\nelse:\n    import pkg.shown\n"
        "def f():\n    from .sub import deep\n    import importlib\n"
        "    importlib.import_module('other.plugin')\n"
    )
    for name in ("hidden", "shown"):
        (package / f"{name}.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .. import mod\n")
    (package / "sub" / "deep.py").write_text("from ..mod import f\n")
    graph = _graph(package)
    assert graph["pkg"] == {"pkg.mod", "typing", "pkg.shown", "pkg.hidden"}
    assert graph["pkg.mod"] == {
        "typing",
        "pkg.hidden",
        "pkg.shown",
        "pkg.sub.deep",
        "importlib",
        "other.plugin",
    }
    assert graph["pkg.sub"] == {"pkg.mod"}
    assert graph["pkg.sub.deep"] == {"pkg.mod"}
    assert _cycles(graph) == [["pkg.mod", "pkg.sub.deep", "pkg.mod"]]


@pytest.mark.parametrize("folder", sorted(MEMBERS))
def test_no_member_has_an_import_cycle(folder: str) -> None:
    """No member's modules import each other, not even only for type checkers."""
    package = MEMBERS[folder][1]
    graph = _graph(ROOT / folder / package)
    cycles = _cycles(graph)
    assert not cycles, f"import cycles in the {package} package:\n" + _format(cycles, graph)


def test_the_sdk_program_model_is_pure() -> None:
    """``agentrt.program`` (the DAG model) imports nothing of what runs programs: not the
    runtime and its transports, the journal, OpenTelemetry, httpx or openai."""
    graph = _graph(ROOT / "agentrt" / "agentrt")
    runner = ("agentrt.runtime", "agentrt.journal", "opentelemetry", "httpx", "openai")
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module == "agentrt.program" or module.startswith("agentrt.program.")
        for target in targets
        if any(target == name or target.startswith(name + ".") for name in runner)
    )
    assert not wrong, "the program model imports its runner:\n" + "\n".join(wrong)


_OTHER_MODULE = re.compile(rf"^(?:{'|'.join(sorted(OTHER_PACKAGES))})(?:\.\w+)*$")


def _other_member_names(path: Path) -> Iterator[str]:
    """String constants in ``path`` that name a module of another member (a name that may reach
    ``importlib.import_module`` however it gets there)."""
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _OTHER_MODULE.match(node.value)
        ):
            yield node.value


def test_the_sdk_imports_no_other_member() -> None:
    sdk = ROOT / "agentrt" / "agentrt"
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in _graph(sdk).items()
        for target in targets
        if target.split(".", 1)[0] in OTHER_PACKAGES
    )
    wrong += sorted(
        f"{module} names the module {name!r}"
        for module, path in _modules(sdk).items()
        for name in _other_member_names(path)
    )
    assert not wrong, "the SDK imports other members:\n" + "\n".join(wrong)


def test_the_serving_package_imports_no_other_member() -> None:
    """agentrt_serving (the hardened HTTP surface) sits below both servers: it imports neither
    of them, nor the SDK, so that neither server's wheel drags in the other."""
    serving = ROOT / "serving" / "agentrt_serving"
    ours = OTHER_PACKAGES - {"agentrt_serving"} | {"agentrt"}
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in _graph(serving).items()
        for target in targets
        if target.split(".", 1)[0] in ours
    )
    assert not wrong, "agentrt_serving imports other members:\n" + "\n".join(wrong)
    for folder in ("controller", "emulator"):
        dependencies = _project(folder)["dependencies"]
        assert isinstance(dependencies, list)
        assert "agentrt-serving" in {Requirement(line).name for line in dependencies}, folder


def test_the_member_name_finder(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "import importlib\nNAME = 'agentrt_controller.cli'\n"
        "def f(): return importlib.import_module(NAME)\n"
        "DOC = 'agentrt_controller is a member'\nDIST = 'agentrt-controller'\n"
    )
    assert list(_other_member_names(path)) == ["agentrt_controller.cli"]


# --- d. the SDK wheel alone ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("AGENTRT_CHECK_WHEELS") != "1",
    reason="set AGENTRT_CHECK_WHEELS=1: installs the SDK wheel in a fresh venv from the index",
)
def test_the_sdk_wheel_alone() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check-sdk-wheel.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- e. the agentrt command ---------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the agentrt parser has no subcommands")


def test_every_member_is_installed_with_its_commands() -> None:
    installed = {ep.name: ep.value for ep in metadata.entry_points(group=cli.COMMAND_GROUP)}
    assert installed == {
        name: target for eps in ENTRY_POINTS.values() for name, target in eps.items()
    }
    known = {command: dist for command, (dist, _) in cli.KNOWN_COMMANDS.items()}
    assert known == {
        command: dist for dist, _, commands in MEMBERS.values() for command in commands
    }


def test_every_known_command_is_present() -> None:
    subcommands = _subcommands(cli.build_parser())
    assert list(subcommands) == list(cli.KNOWN_COMMANDS)
    for command, parser in subcommands.items():
        assert "Not installed" not in (parser.description or ""), command


def test_an_absent_distribution_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    only_sdk = [ep for ep in metadata.entry_points(group=cli.COMMAND_GROUP) if ep.name == "journal"]
    assert len(only_sdk) == 1
    subcommands = _subcommands(cli.build_parser(only_sdk))
    assert set(subcommands) == set(cli.KNOWN_COMMANDS)
    for command, (dist, _) in cli.KNOWN_COMMANDS.items():
        if dist == "agentrt":
            continue
        assert cli.main([command, "serve", "--port", "1"], entry_points=only_sdk) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1, lines
        assert f"agentrt {command}: " in lines[0]
        assert f"pip install {dist}" in lines[0]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["journal", "--help"], entry_points=only_sdk)
    assert exit_info.value.code == 0
    assert "Not installed" not in capsys.readouterr().out


def test_no_entry_points_leaves_every_command_a_stub(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["journal", "list"], entry_points=[]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "pip install agentrt" in line
