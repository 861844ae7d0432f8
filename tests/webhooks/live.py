"""Helpers of the live webhook tests: a migrated database holding a subscription, and its delivery log."""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECRET = "live-webhook-secret"

# Run as an operator would: migrate, then the subscription (what the admin's form saves).
_PREPARE = """
import os, sys
import django
from django.core.management import call_command
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")
django.setup()
call_command("migrate", interactive=False, verbosity=0)
from registry.webhooks.models import WebhookSubscription
subscription = WebhookSubscription(name="live", url=sys.argv[1], secret=sys.argv[2], apps=sys.argv[3])
subscription.full_clean()
subscription.save()
"""


def prepare_database(env: dict[str, str], receiver_url: str, apps: str = "") -> None:
    subprocess.run(
        [sys.executable, "-c", _PREPARE, receiver_url, SECRET, apps],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )


def deliveries(database: Path) -> list[dict]:
    """The delivery log, read straight from the node's SQLite file (oldest first)."""
    with sqlite3.connect(database, timeout=5) as connection:
        connection.row_factory = sqlite3.Row
        rows = connection.execute(
            "SELECT id, change_id, action, app, status, attempts, last_status_code, last_error"
            " FROM registry_webhookdelivery ORDER BY id"
        ).fetchall()
    return [dict(row) for row in rows]


def signed_correctly(request) -> bool:
    signed = request.headers["x-eureka-timestamp"].encode() + b"." + request.body
    expected = "sha256=" + hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, request.headers.get("x-eureka-signature", ""))
