"""The Content-Security-Policy of the site's pages (the console's and the admin's): Django 5.2 has none
of its own to send (Django 6.0's ``SECURE_CSP`` would replace this)."""

from __future__ import annotations

# Scripts, styles, images and fetches from this site only, none inline (the pages have no inline script,
# style or handler; tests/browser checks that Chromium reports no violation): a registrant's text can
# never run in an operator's page. Not framed, no plugins, forms post here only.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


class ContentSecurityPolicyMiddleware:
    """Sends ``CONTENT_SECURITY_POLICY`` with every response that set none of its own.

    The console and the admin load scripts and styles from the site's static files only, with no
    inline script, style attribute or event handler, so the policy allows nothing else: text a
    registrant sent that a page ever failed to escape still could not run, nor load anything from
    elsewhere. Protocol requests (``/eureka/``) never reach Django's middleware, and need none."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response
