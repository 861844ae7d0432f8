"""The Content-Security-Policy of the site's pages (the console's and the admin's): Django 5.2 has none
of its own to send (Django 6.0's ``SECURE_CSP`` would replace this)."""

from __future__ import annotations

from django.conf import settings


class ContentSecurityPolicyMiddleware:
    """Sends ``EUREKA_CONTENT_SECURITY_POLICY`` with every response that set none of its own.

    The console and the admin load scripts and styles from the site's static files only, with no
    inline script, style attribute or event handler, so the policy allows nothing else: text a
    registrant sent that a page ever failed to escape still could not run, nor load anything from
    elsewhere. Protocol requests (``/eureka/``) never reach Django's middleware, and need none."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = settings.EUREKA_CONTENT_SECURITY_POLICY

    def __call__(self, request):
        response = self.get_response(request)
        if self.policy:
            response.setdefault("Content-Security-Policy", self.policy)
        return response
