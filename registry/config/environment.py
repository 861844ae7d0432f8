"""Reading the environment: each variable's text, typed and checked as its field declares.

``Environment`` reads the fields of a settings dataclass (``setting()`` in registry/domain/config.py
declares each one's variable) from the mapping eureka_site/settings.py hands over. ``read_variable``
takes one variable's text, and is the one place a ``NAME_FILE`` variable is read: a secret may be in
the file it names (Docker and systemd credentials). Django's ``SECRET_KEY`` is read with it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from registry.domain.config import BadSetting, Variable, declared_default, variable_of

# Spellings of a boolean (django-environ's true ones, and their opposites); anything else is an error.
_TRUE = frozenset({"true", "on", "ok", "y", "yes", "1"})
_FALSE = frozenset({"false", "off", "n", "no", "0", ""})


def read_variable(environ: Mapping[str, str], name: str, *, secret: bool = False) -> str | None:
    """``name``'s text, None when it is unset. A secret may instead be in a file: ``NAME_FILE`` names
    it, and wins over ``NAME``."""
    if secret:
        path = environ.get(f"{name}_FILE", "")
        if path:
            return Path(path).read_text().strip()
    return environ.get(name)


class Environment:
    """Typed reads of one variable each; a bad value raises BadSetting naming it."""

    def __init__(self, environ: Mapping[str, str]):
        self.environ = environ

    def read(self, variable: Variable, default: Any, read_so_far: Mapping[str, Any]) -> Any:
        """The field's value: ``default`` when the variable is unset, else its value checked and typed
        as the default is (times ``scale``)."""
        raw = read_variable(self.environ, variable.name, secret=variable.secret)
        if raw is None:
            return default
        name = variable.name
        if variable.read is not None:
            try:
                return variable.read(raw, read_so_far)
            except BadSetting:
                raise
            except ValueError as exc:
                raise BadSetting(name, str(exc)) from None
        if variable.choices:
            if raw not in variable.choices:
                raise BadSetting(name, f"must be one of {', '.join(variable.choices)}, got {raw!r}")
            return raw
        if isinstance(default, bool):
            return self._bool(name, raw)
        if isinstance(default, int):
            return variable.scale * self._int(name, raw, variable.minimum)
        if isinstance(default, float):
            return self._float(name, raw, variable.minimum)
        return raw

    @staticmethod
    def _int(name: str, raw: str, minimum: float | None) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise BadSetting(name, f"expected a whole number, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise BadSetting(name, f"must be >= {minimum}, got {value}")
        return value

    @staticmethod
    def _float(name: str, raw: str, minimum: float | None) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise BadSetting(name, f"expected a number, got {raw!r}") from None
        if minimum is not None and not value >= minimum:  # NaN too
            raise BadSetting(name, f"must be >= {minimum}, got {raw.strip()}")
        return value

    @staticmethod
    def _bool(name: str, raw: str) -> bool:
        value = raw.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise BadSetting(name, f"expected true or false, got {raw!r}")

    def fields(self, cls: type, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """Every field of ``cls`` that has a variable; ``defaults`` (a profile's, or derived from other
        settings) replace the declared ones."""
        values: dict[str, Any] = {}
        for part in fields(cls):
            variable = variable_of(part)
            if variable is not None:
                default = defaults[part.name] if part.name in defaults else declared_default(part)
                values[part.name] = self.read(variable, default, values)
        return values
