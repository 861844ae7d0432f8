"""The project's layout holds: no import cycles, a Django-free domain, and the docs' layout tree as it is.

The imports are read from the source (every ``import`` statement, those inside functions and
``if TYPE_CHECKING:`` blocks included), so a cycle is caught even where Python would tolerate it
at run time.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("registry", "dashboard", "eureka_site")
# The domain: the lease map and Eureka's rules, with no Django and none of the packages around it. Every
# module of registry/domain/ belongs to it.
DOMAIN = tuple(
    sorted(
        "registry.domain." + path.stem
        for path in (ROOT / "registry" / "domain").glob("*.py")
        if path.name != "__init__.py"
    )
)
# What registry/ itself holds besides its packages: the files Django looks for in an app.
APP_FILES = {"__init__.py", "apps.py", "models.py"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                modules[module_name(path)] = path
    return modules


def imported_names(path: Path, name: str) -> set[str]:
    """Every module name an ``import`` in ``path`` may load (``from a import b`` gives a and a.b)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in imported_names(path, name):
            if imported.split(".")[0] not in PACKAGES:
                continue
            # ``from pkg import name`` names a module only when pkg.name is one.
            if imported in modules:
                targets.add(imported)
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
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
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_the_projects_modules():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The Django app's own wiring (its AppConfig, and the models module Django loads): one package, above
# the packages whose models and signals it registers and below the admin and the console, which read
# its models (``LEVELS``).
APP_SHELL = ("registry.apps", "registry.models")
# Wire code sits on the domain and the response cache only: everything that speaks HTTP uses it.
WIRE_MAY_IMPORT = {"registry.domain", "registry.cache"}
# eureka_site/ wires the site together (settings, URLconfs, WSGI and Celery entry points); code lives
# in the packages.
WIRING = {"apps", "celery", "protocol_urls", "reader_urls", "reader_wsgi", "settings", "urls", "wsgi"}


def package_of(module: str) -> str:
    """The package a module counts for: a folder of registry/ (``registry.cluster``,
    ``registry.domain``), the app's own files, or a top-level package (``dashboard``, ``eureka_site``)."""
    parts = module.split(".")
    if module in APP_SHELL:
        return "registry (app)"
    if parts[0] == "registry" and len(parts) > 1 and (ROOT / "registry" / parts[1]).is_dir():
        return f"registry.{parts[1]}"
    if parts[0] == "registry":
        return "registry (app)"
    return parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = package_of(module)
        packages.setdefault(source, set()).update(package_of(target) for target in targets)
        packages[source].discard(source)
    return packages


def test_no_import_cycle_between_the_projects_packages():
    """Packages by level (``LEVELS``): the domain, the settings (config), then the cache and the wire,
    the packages that use them (cluster, health, webhooks, feed, access), the node (runtime), the HTTP
    servers that run it (serving), the views (protocol), the pages (reads, dashboard, admin), the
    reader; eureka_site wires them. A package never imports one above it."""
    assert cycles(package_graph(import_graph())) == []


# The packages by level, lowest first, as docs/architecture.md's Layout lists them: a package imports
# only packages of a lower level, never one of its own level or above.
LEVELS: tuple[frozenset[str], ...] = tuple(
    frozenset(level)
    for level in (
        {"registry.domain"},
        # The settings: the domain's rules and the site's sections, parsed from the environment.
        {"registry.config"},
        {"registry.cache"},
        {"registry.wire"},
        # registry.mesh: the mesh process's catalog and its servers (xDS, DNS), on the settings alone.
        {
            "registry.access",
            "registry.cluster",
            "registry.health",
            "registry.webhooks",
            "registry.feed",
            "registry.mesh",
        },
        {"registry.runtime"},
        # The HTTP servers run the node; only the views (/metrics reads their connection counts) and
        # what is above them import the servers.
        {"registry.serving"},
        {"registry.protocol"},
        # The app's own files: its AppConfig and models, which the admin and the console read.
        {"registry.console_data", "registry.management", "registry (app)"},
        {"registry.admin"},
        {"dashboard", "registry.reader"},
        {"eureka_site"},
    )
)


def level_of(package: str) -> int:
    for level, members in enumerate(LEVELS):
        if package in members:
            return level
    raise AssertionError(f"{package} is in no level: add it to LEVELS in tests/test_layout.py")


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{source} imports {target}"
        for source, targets in graph.items()
        for target in targets
        if level_of(target) >= level_of(source)
    )


def test_no_package_imports_one_of_its_level_or_above():
    assert upward_arrows(package_graph(import_graph())) == []


def test_an_upward_arrow_is_found():
    graph = {"registry.runtime": {"registry.serving"}, "registry.serving": {"registry.runtime"}}
    assert upward_arrows(graph) == ["registry.runtime imports registry.serving"]


def test_the_servers_run_the_node_and_nothing_below_them_imports_them():
    graph = package_graph(import_graph())
    below = {package for package in graph if level_of(package) < level_of("registry.serving")}
    assert "registry.runtime" in graph["registry.serving"]
    assert sorted(package for package in below if "registry.serving" in graph[package]) == []


def test_a_package_cycle_is_found_even_when_the_modules_form_none():
    graph = {
        "registry.cluster.replicator": {"registry.wire.codecs"},
        "registry.wire.payloads": {"registry.cluster.peers"},
        "registry.cluster.peers": set(),
        "registry.wire.codecs": set(),
    }
    assert cycles(graph) == []
    assert cycles(package_graph(graph)) == [["registry.cluster", "registry.wire"]]


def test_wire_code_imports_only_the_domain_and_the_cache():
    graph = package_graph(import_graph())
    assert graph["registry.wire"] <= WIRE_MAY_IMPORT, graph["registry.wire"] - WIRE_MAY_IMPORT


def test_eureka_site_holds_wiring_only():
    modules = {name.split(".")[-1] for name in project_modules() if name.startswith("eureka_site.")}
    assert modules <= WIRING, f"code in eureka_site/: {sorted(modules - WIRING)}"


def test_every_project_import_names_a_module_that_exists():
    """A module moved without its importers fixed would otherwise be found only at run time."""
    modules = project_modules()
    missing = []
    for name, path in modules.items():
        for imported in imported_names(path, name):
            top = imported.split(".")[0]
            if top not in PACKAGES or imported in modules:
                continue
            parent, _, attribute = imported.rpartition(".")
            # ``from module import attribute``: fine when the module exists and defines it.
            if parent in modules and re.search(
                # defined there, or imported there (on one line, or as a line of a parenthesised list)
                rf"^(?:def|class|async def) {attribute}\b|^{attribute}\b\s*[:=]|import .*\b{attribute}\b"
                rf"|^\s+{attribute},?$",
                modules[parent].read_text(),
                re.M,
            ):
                continue
            missing.append(f"{name} imports {imported}")
    assert missing == []


def test_the_domain_imports_neither_django_nor_the_packages_around_it():
    modules = project_modules()
    for name in DOMAIN:
        imported = imported_names(modules[name], name)
        frameworks = {m for m in imported if m.split(".")[0] in ("django", "rest_framework", "celery")}
        # ``registry`` itself is the package; its __init__ holds only a docstring.
        around = {
            m
            for m in imported
            if m in modules and m not in DOMAIN and m not in ("registry", "registry.domain")
        }
        assert (frameworks, around) == (set(), set()), f"{name} imports {frameworks | around}"


def test_the_domain_imports_without_django_settings():
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import sys\n"
        f"import {', '.join(DOMAIN)}\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework')], 'Django'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def layout_tree() -> list[str]:
    """The folders the Layout tree of docs/architecture.md names, as paths."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"^## Layout\n.*?^```text\n(.*?)^```", text, re.M | re.S)
    assert block, "docs/architecture.md has a '## Layout' section with a ```text tree"
    paths: list[str] = []
    stack: list[tuple[int, str]] = []
    for line in block.group(1).splitlines():
        match = re.match(r"^([│├└─ ]*)([\w.-]+/)", line)
        if not match:
            continue
        depth = len(match.group(1)) // 4
        while stack and stack[-1][0] >= depth:
            stack.pop()
        path = "/".join([entry for _, entry in stack] + [match.group(2).rstrip("/")])
        stack.append((depth, match.group(2).rstrip("/")))
        paths.append(path)
    return paths


def test_registrys_top_level_holds_only_djangos_app_files_and_packages():
    loose = {
        path.name
        for path in (ROOT / "registry").iterdir()
        if path.is_file() and path.suffix == ".py" and path.name not in APP_FILES
    }
    assert loose == set(), f"modules loose in registry/ (the domain lives in registry/domain/): {loose}"


def test_the_docs_layout_tree_matches_the_folders():
    listed = layout_tree()
    for path in listed:
        assert (ROOT / path).is_dir(), f"docs/architecture.md's layout names {path}/, which does not exist"
    # Every package of the application is in the tree (Django's own folders excepted).
    packages = {
        str(init.parent.relative_to(ROOT))
        for package in ("registry", "dashboard")
        for init in (ROOT / package).rglob("__init__.py")
        if not {"migrations", "templatetags"} & set(init.parent.parts)
    }
    assert packages <= set(listed), f"not in docs/architecture.md's layout: {sorted(packages - set(listed))}"


@pytest.mark.parametrize(
    "package",
    [
        "registry",
        "registry/protocol",
        "registry/cache",
        "registry/cluster",
        "registry/runtime",
        "registry/serving",
    ]
    + [
        "registry/admin",
        "registry/reader",
        "registry/access",
        "registry/wire",
        "registry/console_data",
        "registry/domain",
        "registry/config",
        "dashboard",
    ],
)
def test_each_package_says_what_it_is(package):
    docstring = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text()))
    assert docstring and len(docstring.split()) >= 20, f"{package}/__init__.py needs a docstring"
