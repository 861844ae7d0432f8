"""The API accounts as DRF authentication and permission classes for the protocol views.

A request names its account by HTTP Basic credentials, by a client certificate, or both
(``identify``); the role and the app grants of that account then decide what it may do
(``RolePermission``), whichever way it proved itself.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.signals import setting_changed
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.permissions import BasePermission

from registry.access import accounts, certificates, grants, roles
from registry.access.clients import client_address, is_trusted_proxy
from registry.access.credentials import Principal
from registry.domain.refusals import refusal_fields, since_last_line
from registry.wire.http import RefusedWithReason, is_replication
from registry.wire.request_bodies import EarlyAnswer, has_body

logger = logging.getLogger("registry.access")

REALM = 'Basic realm="eureka", charset="UTF-8"'


def _environ_key(header: str) -> str:
    return "HTTP_" + header.upper().replace("-", "_") if header else ""


# EUREKA_API_AUTH and EUREKA_CLIENT_CERT_HEADER, kept here: every protocol request asks, and a Django
# settings read is not free (LazySettings' __getattribute__). Settings change at run time only in tests.
_api_accounts_on = settings.EUREKA.access.api_auth
_cert_header_key = _environ_key(settings.EUREKA.access.client_cert_header)


def api_accounts_on() -> bool:
    return _api_accounts_on


def _follow_setting(*, setting: str, value: object, **kwargs) -> None:
    global _api_accounts_on, _cert_header_key
    if setting == "EUREKA":
        _api_accounts_on = settings.EUREKA.access.api_auth
        _cert_header_key = _environ_key(settings.EUREKA.access.client_cert_header)


setting_changed.connect(_follow_setting)

# Where the request's certificate, once looked for, is kept in its environ (the body gate and the view
# both ask): a ClientCertificate, None, or the BadCertificate it could not be read for.
_CERTIFICATE_SEEN = "eureka.access.certificate"

# The refusal log's kind for a certificate header sent by an address that is no trusted proxy.
UNTRUSTED_HEADER = "untrusted certificate header"


def _ignored_header(peer: str) -> None:
    count = accounts.refusal_lines().note(UNTRUSTED_HEADER)
    if count:
        logger.warning(
            "Client certificate header (EUREKA_CLIENT_CERT_HEADER) ignored: sent by %s, which is not "
            "in EUREKA_TRUSTED_PROXIES%s",
            peer,
            since_last_line(count),
            extra=refusal_fields(UNTRUSTED_HEADER, count),
        )


def client_certificate(environ: dict) -> certificates.ClientCertificate | None:
    """The request's client certificate, or None: the one a trusted proxy passed in its header, else
    the one the TLS connection verified (``environ["eureka.client_cert"]``, put there by the server).
    A header from any other address is ignored and logged (at most once a minute, with a count).
    ``BadCertificate`` when there is one and it cannot be read."""
    seen = environ.get(_CERTIFICATE_SEEN, environ)
    if seen is environ:
        try:
            seen = _find_certificate(environ)
        except certificates.BadCertificate as exc:
            seen = exc
        environ[_CERTIFICATE_SEEN] = seen
    if isinstance(seen, certificates.BadCertificate):
        raise seen
    return seen


def _find_certificate(environ: dict) -> certificates.ClientCertificate | None:
    header = environ.get(_cert_header_key) if _cert_header_key else None
    if header:
        peer = environ.get("REMOTE_ADDR", "")
        if is_trusted_proxy(peer):
            # The proxy's header names the client; a certificate the proxy itself presented does not.
            return certificates.from_header(header, peer)
        _ignored_header(peer)
    der = environ.get(certificates.ENVIRON_KEY)
    if der:
        return certificates.from_der(bytes(der))
    return None


def identify(environ: dict, client=lambda: "") -> Principal | None:
    """The account a request names, or None when it names none (no credentials, no certificate).

    Basic credentials and a client certificate may come together: when both name an account they
    must name the same one (else ``Refused``); a certificate that names no account adds nothing to
    Basic credentials that verify. A certificate alone must name an account (``Refused``)."""
    header = environ.get("HTTP_AUTHORIZATION")
    try:
        certificate = client_certificate(environ)
    except certificates.BadCertificate as exc:
        raise accounts.Refused(f"unreadable client certificate: {exc}") from None
    return principal_of(header, certificate, client)


def principal_of(
    header: str | None, certificate: certificates.ClientCertificate | None, client=lambda: ""
) -> Principal | None:
    """``identify``'s rules for credentials already read: an ``Authorization`` header and a verified
    client certificate, either or both (the mesh's xDS streams carry the same two)."""
    if certificate is None:
        return accounts.authenticate(header, client) if header else None
    if not header:
        return accounts.authenticate_certificate(certificate)
    by_password = accounts.authenticate(header, client)
    try:
        by_certificate = accounts.authenticate_certificate(certificate)
    except accounts.Refused:
        return by_password
    if by_certificate.user_id != by_password.user_id:
        raise accounts.Refused(
            f"the Basic credentials name account {by_password.username!r} but the client certificate "
            f"({certificate.source}) names {by_certificate.username!r}",
            by_password.username,
        )
    return by_password


class SignInBusy(Throttled):
    """503 with Retry-After: the node had too many password checks waiting to check these credentials
    (registry/access/hashers.py). A 5xx, not a 4xx: the client is not at fault, and a Eureka client
    tries the next server of its list."""

    status_code = 503
    default_detail = "Too many password checks are waiting on this node."


NO_CREDENTIALS = EarlyAnswer(401, (("WWW-Authenticate", REALM),))


class _EnvironRequest:
    """What ``client_address`` reads of a request, before Django has built one."""

    __slots__ = ("META",)

    def __init__(self, environ: dict):
        self.META = environ


def credentials_open_the_api(environ: dict) -> bool | EarlyAnswer:
    """Asked before a protocol request's body is read (``registry/wire/handlers.py``): False when API
    accounts are on and the request's credentials (Basic, a client certificate: ``identify``) open
    nothing — wrong, a certificate naming no account, or from an address or for a name that failed
    too often. That body is then never read: the view refuses the request (401,
    429) on its credentials alone, so an anonymous client cannot make the node buffer bodies. The
    verdict is the credential cache's, so the view's own check that follows costs a lookup.

    A body sent with no credentials at all is answered here, 401 with the challenge as the view
    would, counted and logged as the view would (one line a minute): a flood of such requests then
    costs the node an answer each, not a view and a log line each."""
    if not _api_accounts_on:
        return True
    try:
        principal = identify(environ, lambda: client_address(_EnvironRequest(environ)))
    except accounts.Busy as busy:
        # Not checked (too many password checks waiting): answered here, since the view's own check
        # could pass a moment later and then find the body unread.
        address = client_address(_EnvironRequest(environ))
        accounts.note_refusal("busy", f"{busy.reason} for {busy.username!r} from {address}")
        return EarlyAnswer(503, (("Retry-After", str(busy.retry_after)),))
    except accounts.Refused:
        return False
    if principal is None:
        if not has_body(environ):
            return False
        address = client_address(_EnvironRequest(environ))
        accounts.note_refusal("unauthenticated", f"no credentials (with a request body) from {address}")
        return NO_CREDENTIALS
    return True


class AccountAuthentication(BaseAuthentication):
    """HTTP Basic credentials of a Django user, as every Eureka client sends from its service URL, or
    a client certificate naming one (``identify``)."""

    def authenticate(self, request):
        try:
            principal = identify(request.META, lambda: client_address(request))
        except accounts.TooManyFailures as refused:
            accounts.note_refusal(
                "throttled", f"{refused.reason} for {refused.username!r} from {client_address(request)}"
            )
            # 429 with Retry-After (registry/wire/http.py): a client backs off instead of retrying.
            raise Throttled(wait=refused.retry_after) from None
        except accounts.Busy as busy:
            address = client_address(request)
            accounts.note_refusal("busy", f"{busy.reason} for {busy.username!r} from {address}")
            # 503 with Retry-After, no body (registry/wire/http.py handles it as a Throttled).
            raise SignInBusy(wait=busy.retry_after) from None
        except accounts.Refused as refused:
            who = f" for {refused.username!r}" if refused.username else ""
            accounts.note_refusal("unauthenticated", f"{refused.reason}{who} from {client_address(request)}")
            raise AuthenticationFailed(f"Authentication failed: {refused.reason}") from None
        if principal is None:
            return None  # the permission check answers 401 with the challenge
        return principal, None

    def authenticate_header(self, request):
        return REALM


class AppNotGranted(RefusedWithReason):
    """403: a client account wrote an instance of an app none of its grants matches."""


class RolePermission(BasePermission):
    """Reads need the reader role (or more), instance writes the client role, replication the peer role;
    an instance write of an account with app grants must name an app they match (``check_grants``)."""

    def has_permission(self, request, view):
        user = request.user
        needed = roles.required_permission(
            request.method,
            is_replication(request),
            getattr(view, "replication_endpoint", False),
        )
        if user is None:
            accounts.note_refusal("unauthenticated", f"no credentials from {client_address(request)}")
            return False
        if needed in user.permissions:
            if needed == roles.WRITE:
                check_grants(request, view, user)
            return True
        accounts.note_refusal(
            "forbidden",
            f"{user.username!r} lacks {needed} for {request.method} from {client_address(request)}",
        )
        return False


def check_grants(request, view, user: Principal) -> None:
    """``AppNotGranted`` when ``user`` has app grants and the write's app (the ``{app}`` of its path:
    register, renew, cancel, status, metadata) matches none of them. Peers are not scoped (they hold
    REPLICATE: they replicate every app); a write that names no app is refused to a scoped account.
    Replicated writes and batches never get here: they need REPLICATE, which no client holds."""
    if not user.apps or roles.REPLICATE in user.permissions:
        return
    app = (view.kwargs or {}).get("app")
    if app is not None and grants.allows(user.apps, app):
        return
    what = f"app {app.upper()!r}" if app is not None else "a write that names no app"
    reason = f"Account {user.username!r} may not write {what}: its app grants are {', '.join(user.apps)}"
    accounts.note_refusal("forbidden", f"{reason} ({request.method} from {client_address(request)})")
    # A heartbeat's answer is decoded as an instance by Java clients: no body there (see RefusedWithReason).
    raise AppNotGranted(reason, with_body=request.method not in getattr(view, "bodiless_refusals", ()))
