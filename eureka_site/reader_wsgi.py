"""WSGI entry point of a reader (``registry/reader/``; ``gunicorn -c deploy/gunicorn_reader.conf.py``).

Everything goes through the lean protocol handler (``registry/wire/handlers.py``) against the reader's
URLconf, with the node's handling of chunked and undecodable bodies. No scheduler, no node: this
process must never build a lease map, so ``get_node()`` is forbidden here and would fail loudly.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402

from registry.reader.service import check_settings  # noqa: E402
from registry.runtime.process import forbid_node  # noqa: E402
from registry.wire.handlers import ProtocolHandler, body_deadlines  # noqa: E402
from registry.wire.http import browser_refusal  # noqa: E402
from registry.wire.request_bodies import (  # noqa: E402
    BodyRefused,
    buffer_body,
    plain_wsgi_answer,
    refuse_unusable_charset,
)

READER_URLCONF = "eureka_site.reader_urls"


class ReaderHandler(ProtocolHandler):
    urlconf = READER_URLCONF


class ReaderApplication:
    def __init__(self):
        self.handler = ReaderHandler()
        self.body_deadlines = body_deadlines()

    def __call__(self, environ, start_response):
        # Refused here as on the node: the forwarder does not pass Origin or Sec-Fetch-* on.
        refusal = browser_refusal(environ)
        if refusal is not None:
            return plain_wsgi_answer(start_response, 403, refusal)
        try:
            refuse_unusable_charset(environ)
            buffer_body(environ, settings.EUREKA.connections.max_body_bytes, self.body_deadlines)
        except BodyRefused as refusal:
            return refusal.wsgi_response(start_response)
        return self.handler(environ, start_response)


check_settings(settings)
forbid_node("this is a reader: it serves from Redis and forwards the rest to EUREKA_READER_NODE_URL")
application = ReaderApplication()
