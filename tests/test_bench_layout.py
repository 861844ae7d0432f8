"""bench/ has one entry point (bench/run.py) and one node launcher (bench/nodes.py).

Read from the sources, nothing is run but ``bench/run.py --list`` (no Django, no server): every
benchmark script is listed there, and every one that is Python imports the launcher instead of
starting gunicorn, Celery, redis-server, deploy/stack.sh or migrations on its own. And where the tree
cites a section of bench/README.md or bench/HISTORY.md, that section exists.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
ENTRY, LAUNCHER = "run.py", "nodes.py"
# Only bench/nodes.py may name these in code: the commands and files that start a server.
SERVER_FILES = {"deploy/gunicorn.conf.py", "deploy/gunicorn_reader.conf.py", "deploy/stack.sh", "manage.py"}
SERVER_PROGRAMS = {"gunicorn", "celery", "redis-server"}


def listed_benchmarks() -> dict[str, str]:
    """name -> first line of its description, from ``bench/run.py --list``."""
    done = subprocess.run(
        [sys.executable, str(BENCH / ENTRY), "--list"], capture_output=True, text=True, timeout=60, check=True
    )
    rows = [line.split(None, 1) for line in done.stdout.splitlines() if line.startswith("  ")]
    return {row[0]: row[1] if len(row) > 1 else "" for row in rows}


def scripts() -> list[Path]:
    return sorted(
        path
        for path in [*BENCH.glob("*.py"), *BENCH.glob("*.sh")]
        if path.name not in (ENTRY, LAUNCHER, "run.sh")
    )


def code_strings(tree: ast.Module) -> list[str]:
    """String constants of the module but its docstrings (which may well say how a node is started)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def programs_started(tree: ast.Module) -> list[str]:
    """Server programs named as a command: ``BIN / "gunicorn"``, ``shutil.which("redis-server")``, or the
    first item of a command list (a ``"gunicorn" in cmdline`` test that finds processes is no start)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            candidates = [node.right]
        elif isinstance(node, ast.Call):
            candidates = node.args[:1]
        elif isinstance(node, ast.List):
            candidates = node.elts[:1]
        else:
            continue
        found += [c.value for c in candidates if isinstance(c, ast.Constant) and c.value in SERVER_PROGRAMS]
    return found


def imports_launcher(tree: ast.Module) -> bool:
    return any(
        (isinstance(node, ast.ImportFrom) and node.module == "nodes")
        or (isinstance(node, ast.Import) and any(alias.name == "nodes" for alias in node.names))
        for node in ast.walk(tree)
    )


def test_every_benchmark_script_is_listed_by_the_entry_point():
    sys.path.insert(0, str(BENCH))
    try:
        from run import BENCHMARKS, PARTS
    finally:
        sys.path.remove(str(BENCH))
    listed = listed_benchmarks()
    assert set(listed) == set(BENCHMARKS)
    assert all(listed.values()), f"a benchmark without a description: {listed}"
    reachable = {file for file, _ in BENCHMARKS.values()} | set(PARTS)
    missing = [path.name for path in scripts() if path.name not in reachable]
    assert not missing, f"bench scripts that bench/run.py does not list: {missing}"
    for name, (file, _) in BENCHMARKS.items():
        assert (BENCH / file).is_file(), f"{name}: bench/{file} does not exist"
    headings = [line.lstrip("#").strip() for line in (BENCH / "README.md").read_text().splitlines()]
    for name, (_, section) in BENCHMARKS.items():
        assert any(h.startswith(section) for h in headings), f"{name}: no section {section!r} in README"
    for file, name in PARTS.items():
        assert name in BENCHMARKS and (BENCH / file).is_file(), (
            f"{file} is part of {name}, which is not listed"
        )


def test_every_python_benchmark_starts_servers_through_the_one_launcher():
    offenders = {}
    for path in scripts():
        if path.suffix != ".py":
            continue
        tree = ast.parse(path.read_text())
        if not imports_launcher(tree):
            offenders[path.name] = "does not import bench/nodes.py"
            continue
        named = [text for text in code_strings(tree) if text in SERVER_FILES] + programs_started(tree)
        if named:
            offenders[path.name] = f"starts a server itself: {named}"
    assert not offenders, offenders


def test_the_shell_benchmarks_start_no_node_themselves():
    for path in scripts():
        if path.suffix == ".sh":
            code = "\n".join(
                line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
            )
            assert "gunicorn -c" not in code and "manage.py" not in code, path.name


# Comments and docs cite bench/README.md or bench/HISTORY.md by section: the path, then the section's
# name in double quotes, maybe more names after commas (a sub-entry, or words of a table row).
CITATION = re.compile(r'bench/(README|HISTORY)(?:\.md)?`?,?\s+"([^"]+)"((?:,\s+"[^"]+")*)')
CITING_SUFFIXES = {".py", ".md", ".sh", ".yml", ".yaml", ".html", ".toml", ".go", ".txt"}
# Build output (the docs site, Maven, Go) is skipped: it is made from the sources searched.
NOT_SEARCHED = {"node_modules", "__pycache__", "bin", "site", "target", "var"}


def citing_files() -> list[Path]:
    """The tree's source and docs, without virtualenvs, caches and build output."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in NOT_SEARCHED and (not d.startswith(".") or d == ".github")]
        found += [
            Path(folder) / name
            for name in files
            if Path(name).suffix in CITING_SUFFIXES or name == "Makefile"
        ]
    return found


def titles(text: str) -> list[str]:
    """Headings, and the bold runs that open a line (a dated entry's title), whitespace collapsed."""
    headings = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    bold = re.findall(r"^\*\*(.+?)\*\*", text, flags=re.MULTILINE | re.DOTALL)
    return headings + [" ".join(run.split()) for run in bold]


def test_every_citation_of_a_bench_section_names_one_that_exists():
    documents = {name: (BENCH / f"{name}.md").read_text() for name in ("README", "HISTORY")}
    sections = {name: titles(text) for name, text in documents.items()}
    flat = {name: " ".join(text.split()) for name, text in documents.items()}
    broken, cited = [], 0
    for path in citing_files():
        # A citation may wrap: a comment's or docstring's next line continues it.
        text = re.sub(r"\n[ \t]*(?:#|//|\*)?[ \t]*", " ", path.read_text(errors="replace"))
        for match in CITATION.finditer(text):
            cited += 1
            document, section = match.group(1), match.group(2)
            where = f"{path.relative_to(ROOT)}: bench/{document}.md, {section!r}"
            if not any(section in title for title in sections[document]):
                broken.append(f"{where}: no heading or bold title with that name")
            # Names after the first (an entry inside the section, a row's words) are found in the text.
            for more in re.findall(r'"([^"]+)"', match.group(3)):
                if more not in flat[document]:
                    broken.append(f"{where}, {more!r}: not in that file")
    assert cited, "no citation found: the pattern no longer matches how the tree cites bench/"
    assert not broken, "\n".join(broken)
