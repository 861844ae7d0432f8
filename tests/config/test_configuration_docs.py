"""docs/configuration.md documents every setting once, with the default the parser really has.

The tables are generated from the settings' declarations (registry/config/docs.py, ``manage.py
configuration_docs``); these tests read the committed page back, so a default changed in one place
and not the other, a setting added without its row, or a row left behind fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from registry.config.docs import (
    EMPTY,
    OTHER_VARIABLES,
    config_variables,
    documented_rows,
    render_page,
)
from registry.config.eureka import parse_config

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "configuration.md").read_text()
ROWS = documented_rows(PAGE)
CONFIG_VARIABLES = [variable.name for _, _, variable in config_variables()]
SETTINGS_READ = re.compile(
    r"""env(?:_int|_bool|_secret|\.str|\.list|\.db_url|\.int|\.bool)\(\s*["']([A-Z][A-Z0-9_]+)"""
)
# A variable name as a string literal anywhere in the code around the settings (reads, messages).
QUOTED_NAME = re.compile(r"""["']((?:EUREKA|REDIS)_[A-Z0-9_]+)["']""")


def written(cell: str) -> str:
    """A documented default as it would be written in the environment."""
    return "" if cell == EMPTY else cell.strip("`")


def test_the_committed_page_is_what_the_generator_writes():
    assert render_page(PAGE) == PAGE, "docs/configuration.md is out of date: run manage.py configuration_docs"


@pytest.mark.parametrize("name", CONFIG_VARIABLES)
def test_each_documented_default_is_the_parsers(name):
    """Nothing set, and the variable set to its documented default, parse to the same config (both
    profiles where the page has the ``eureka`` column)."""
    (cells,) = ROWS[name]
    assert parse_config({name: written(cells[1])}) == parse_config({})
    if len(cells) == 4:
        eureka = {"EUREKA_TIMINGS": "eureka"}
        documented = written(cells[2]) if cells[2] else written(cells[1])
        assert parse_config({**eureka, name: documented}) == parse_config(eureka)


def test_with_nothing_set_every_field_has_its_documented_value():
    config = parse_config({})
    for section, part, variable in config_variables():
        value = getattr(getattr(config, section) if section else config, part.name)
        (cells,) = ROWS[variable.name]
        documented = written(cells[1])
        if isinstance(value, bool):
            assert documented == ("true" if value else "false"), variable.name
        elif isinstance(value, int):
            assert int(documented) * variable.scale == value, variable.name
        elif isinstance(value, float):
            assert float(documented) == value, variable.name
        elif isinstance(value, str):
            assert documented == value, variable.name
        elif isinstance(value, tuple):
            assert documented == ",".join(value), variable.name
        else:  # peers, remote regions, a whitelist: none unless set
            assert value == type(value)() and documented == "", variable.name


def test_every_variable_is_documented_exactly_once():
    declared = CONFIG_VARIABLES + [name for name, _, _ in OTHER_VARIABLES]
    assert len(declared) == len(set(declared))
    assert {name: len(rows) for name, rows in ROWS.items() if len(rows) != 1} == {}
    assert set(ROWS) == set(declared)


def test_every_variable_read_anywhere_is_documented():
    settings_py = (ROOT / "eureka_site" / "settings.py").read_text()
    read = set(SETTINGS_READ.findall(settings_py))
    assert {"DEBUG", "SECRET_KEY", "DATABASE_URL", "LOG_LEVEL"} <= read
    for folder in ("registry", "dashboard", "eureka_site", "deploy"):
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(QUOTED_NAME.findall(path.read_text()))
    # Django settings that no variable sets.
    constants = set(re.findall(r"^([A-Z][A-Z0-9_]+) = ", settings_py, re.M)) - set(ROWS)
    assert read - constants - set(ROWS) == set()
