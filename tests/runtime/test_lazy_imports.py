"""An embedded node does not load what only production mode uses (Celery, kombu, the Redis client):
~15 MB a worker (bench/README.md, "Side by side", memory); nor, without peers and before a webhook
delivery, the HTTP client (httpx, ~3 MB), though its URL patterns and views are loaded (at start, in
eureka_site/wsgi.py). A production node loads the project's Celery app before it serves, so the
tasks it sends go to its broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import eureka_site.wsgi
loaded = sorted({name.split(".")[0] for name in sys.modules} & {"celery", "kombu", "redis", "httpx"})
app = None
if "eureka_site.celery" in sys.modules:
    import celery
    app = celery.current_app
print(json.dumps({"loaded": loaded, "app": app and app.main, "broker": app and app.conf.broker_url}))
"""


def serving_process_imports(tmp_path: Path, **extra: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="eureka_site.settings",
        EUREKA_DATA_DIR=str(tmp_path / "data"),
        EUREKA_WARM_RESTART="false",
        **extra,
    )
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_an_embedded_node_loads_neither_celery_nor_the_redis_client_nor_an_http_client(tmp_path):
    found = serving_process_imports(tmp_path)
    assert found["loaded"] == []
    assert found["app"] is None


def test_a_production_node_makes_the_projects_celery_app_current_before_it_serves(tmp_path):
    found = serving_process_imports(
        tmp_path,
        REDIS_URL="redis://127.0.0.1:9/3",
        EUREKA_CONTROL_SECRET="lazy-imports-test-secret",
        SECRET_KEY="lazy-imports-test-secret-key",
    )
    assert found["app"] == "eureka_site"
    assert found["broker"] == "redis://127.0.0.1:9/3"
