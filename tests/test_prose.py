"""The code's prose says what the code does and why, not what a benchmark measured.

Comments and docstrings of the application (registry/, dashboard/, eureka_site/), and the comments of
its deployment files and templates, explain a choice in words. The figures behind a choice (timings,
throughput, shares of a profile, before/after numbers) live in bench/README.md ("Numbers behind the
code"), listed by the file that makes the choice, where they can be re-measured and changed without
touching the code. This test looks for the unmistakable marks of a lab note in that prose; settings'
defaults, limits and protocol facts ("every 30 s", "64 KB pieces", "at most 15 %") are not such marks.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON_PACKAGES = ("registry", "dashboard", "eureka_site", "deploy")
# Deployment files whose ``#`` lines are comments (configuration, units, scripts).
DEPLOY_COMMENTED = ("*.conf", "*.example", "*.service", "*.sh", "*.yaml", "*.yml", "Dockerfile")

# Each mark of a lab note, with what it looks like in one.
LAB_NOTES = {
    "cites the benchmarks": re.compile(r"\bbench/|\bHISTORY\.md\b"),
    "a latency percentile": re.compile(r"\bp(?:50|90|95|99|999)\b"),
    "a profiler's finding": re.compile(r"\bpy-spy\b"),
    "an approximate measure": re.compile(
        r"~\s?\d[\d,.]*\s?(?:ns|µs|us|ms|s|sec|seconds|KB|MB|GB|KiB|MiB|GiB|%|cores?)(?!\w)"
    ),
    "a time in micro- or nanoseconds": re.compile(r"\d\s?(?:µs|ns)(?!\w)"),
    "a range of timings": re.compile(r"\d\s?[-–]\s?\d[\d,.]*\s?(?:ms|µs|ns)(?!\w)"),
    "a measurement": re.compile(r"\d[^.;:]{0,40}\bmeasured\b|\bmeasured\b[^.;:]{0,40}\d", re.I),
    "a percentage of a cost": re.compile(
        r"\d\s?%\s+(?:of\s+(?:a|an|the|its)\s+)?(?:heartbeat|request|renew|CPU|core|time|samples?)\b"
        r"|\d\s?%\s+(?:faster|slower|more|less|fewer|larger|smaller|cheaper)\b",
        re.I,
    ),
    "a measured ratio": re.compile(r"(?<![\w.])\d+(?:\.\d+)?[x×](?!\w)|\b\d+\.\d+\s+times\b"),
    "a speed-up": re.compile(
        r"\b(?:\d+|two|three|four|five|ten|twenty|a hundred)\s+times\s+"
        r"(?:faster|slower|cheaper|as fast|as slow)\b",
        re.I,
    ),
    "a throughput": re.compile(
        r"\d[\d,]*\s?(?:req|requests|renews|heartbeats|fetches|registrations|probes)\s?/\s?s\b", re.I
    ),
    "a dated run": re.compile(r"\b20\d\d-\d\d-\d\d\b(?!T| \d\d:)"),
    "an issue's history": re.compile(r"\b(?:issue|issues) #?\d+", re.I),
}


def python_prose(path: Path) -> list[tuple[int, str]]:
    """The comments (joined when they run over several lines) and docstrings of a Python file."""
    source = path.read_text()
    prose: list[tuple[int, str]] = []
    block: list[str] = []
    start = last = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if block and line != last + 1:
            prose.append((start, " ".join(block)))
            block = []
        if not block:
            start = line
        block.append(token.string.lstrip("#").strip())
        last = line
    if block:
        prose.append((start, " ".join(block)))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                line = node.body[0].lineno
                prose.append((line, " ".join(docstring.split())))
    return prose


def commented_lines(path: Path) -> list[tuple[int, str]]:
    """The ``#`` comments of a configuration file or script, joined when they run over several lines."""
    prose: list[tuple[int, str]] = []
    block: list[str] = []
    start = 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("#") and not stripped.startswith("#!"):
            if not block:
                start = number
            block.append(stripped.lstrip("#").strip())
            continue
        if block:
            prose.append((start, " ".join(block)))
            block = []
    if block:
        prose.append((start, " ".join(block)))
    return prose


def template_comments(path: Path) -> list[tuple[int, str]]:
    text = path.read_text()
    found = []
    for match in re.finditer(r"\{#(.*?)#\}|\{% comment %\}(.*?)\{% endcomment %\}|<!--(.*?)-->", text, re.S):
        body = next(group for group in match.groups() if group is not None)
        found.append((text.count("\n", 0, match.start()) + 1, " ".join(body.split())))
    return found


def app_prose() -> dict[str, list[tuple[int, str]]]:
    files: dict[str, list[tuple[int, str]]] = {}
    for package in PYTHON_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                files[str(path.relative_to(ROOT))] = python_prose(path)
    for pattern in DEPLOY_COMMENTED:
        for path in sorted((ROOT / "deploy").rglob(pattern)):
            if "templates" not in path.relative_to(ROOT / "deploy").parts:
                files[str(path.relative_to(ROOT))] = commented_lines(path)
    for path in sorted((ROOT / "templates").rglob("*.html")):
        files[str(path.relative_to(ROOT))] = template_comments(path)
    return files


def lab_notes(prose: list[tuple[int, str]]) -> list[str]:
    """One line per mark found: where the comment or docstring starts, the mark, and the words around it."""
    return [
        f"line {line}, {mark}: ...{text[max(0, match.start() - 60) : match.end() + 40]}..."
        for line, text in prose
        for mark, pattern in LAB_NOTES.items()
        for match in [pattern.search(text)]
        if match
    ]


def test_the_prose_of_app_code_cites_no_measurement():
    found = [f"{name}, {note}" for name, prose in app_prose().items() for note in lab_notes(prose)]
    assert found == [], (
        "Comments and docstrings say why in words; the figures go to bench/README.md, 'Numbers behind "
        "the code', listed by the file that makes the choice:\n" + "\n".join(found)
    )


def test_enough_prose_is_read_for_the_check_to_mean_something():
    prose = app_prose()
    assert len(prose) > 150
    assert sum(len(texts) for texts in prose.values()) > 1500
    deploy_comments = [
        texts for name, texts in prose.items() if name.startswith("deploy/") and not name.endswith(".py")
    ]
    assert any(deploy_comments)


@pytest.mark.parametrize(
    "note",
    [
        '# Read once: __getattr__ costs (bench/README.md, "Numbers behind the code").',
        "# heartbeats had a long p99 tail",
        "# about 8 % of a heartbeat's CPU, measured with py-spy at saturation",
        "# Decoding a 1 MB batch is ~10 ms the loop cannot interrupt",
        "# ~1.5 µs each, several a request",
        "# the node serves 1.18 times its heartbeats where gunicorn served 0.6",
        "# granian is 1.18x SCE on renews",
        "# written out, ten times faster than asdict",
        "# 1 thread ~11,000/s, 2 threads 10,800 renews/s",
        "# measured on 2026-12-04 after the freeze",
        "# A batch is work a client chooses the size of, so (issue 34):",
        "# setting it cost 6 % of a heartbeat",
        "# pauses of 30-90 ms per 10,000 instances",
        "# a heartbeat waits there (290-799 ms measured)",
    ],
)
def test_a_lab_note_is_found(note, tmp_path):
    path = tmp_path / "module.py"
    path.write_text(f"{note}\nVALUE = 1\n")
    assert lab_notes(python_prose(path)), note


@pytest.mark.parametrize(
    "prose",
    [
        "# Eureka clients renew every 30 s; a lease lasts 90 s.",
        "# Larger answers are written in 64 KB pieces, at most 8 per address.",
        "# at most 15 % of the registry per run, to be safe (85 % of the expected renews)",
        "# The wait after the n-th failure: base, 2 x base, 4 x base, ... up to cap.",
        "# ``2026-08-21T19:05:07 +0000``, Eureka's format",
        "# a log line: ``2026-08-21 19:05:07,123 WARNING registry.events: evicted``",
        "# An IP address in a URL (``fe80::1%eth0``)",
        "# Peers send at most 250 items: four times that is headroom.",
        "# tried again 100 ms later, NETWORK_RETRIES times",
        "# magic b'\\x1f\\x8b', then 0x08 for deflate",
        "# a profiler attached for the purpose rarely catches a stall",
        "# when Prometheus asks, every 15-60 s",
        "# an empty batch every PROBE_INTERVAL_MS measures the peer",
    ],
)
def test_settings_limits_and_protocol_facts_are_no_lab_notes(prose, tmp_path):
    path = tmp_path / "module.py"
    path.write_text(f"{prose}\nVALUE = 1\n")
    assert lab_notes(python_prose(path)) == [], prose
