"""A migrated SQLite database for each node a benchmark starts.

A node started on an empty database serves the protocol, but everything kept in the database fails
over and over: the webhook relay retries its inserts and logs errors on every change, and Celery's
webhook tasks fail every poll. That is work a real deployment (``make run``, ``make stack``, Compose
all migrate first) never does, so a benchmark must not measure it. Migrating takes ~1.5 s, so one run
migrates a template once and copies it for each node.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_template: Path | None = None


def _migrated_template() -> Path:
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="bench-db-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        template = folder / "db.sqlite3"
        env = {**os.environ, "DATABASE_URL": f"sqlite:///{template}", "LOG_LEVEL": "WARNING"}
        env.pop("REDIS_URL", None)  # migrating needs no Redis (nor, then, a control secret)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
        )
        _template = template
    return _template


def node_database_url(folder: Path) -> str:
    """``DATABASE_URL`` of a migrated database in ``folder`` (kept if there is one already: a node
    restarted on its folder keeps its data)."""
    database = folder / "db.sqlite3"
    if not database.exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_migrated_template(), database)
    return f"sqlite:///{database}"
