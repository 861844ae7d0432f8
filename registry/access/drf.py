"""The API accounts as DRF authentication and permission classes for the protocol views."""

from __future__ import annotations

from django.conf import settings
from django.core.signals import setting_changed
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.permissions import BasePermission

from registry.access import accounts, roles
from registry.access.clients import client_address
from registry.wire.http import is_replication
from registry.wire.request_bodies import EarlyAnswer, has_body

REALM = 'Basic realm="eureka", charset="UTF-8"'


# EUREKA_API_AUTH, kept here: every protocol request asks, and a Django settings read is not free
# (LazySettings' __getattribute__). Settings change at run time only in tests.
_api_accounts_on = settings.EUREKA.access.api_auth


def api_accounts_on() -> bool:
    return _api_accounts_on


def _follow_setting(*, setting: str, value: object, **kwargs) -> None:
    global _api_accounts_on
    if setting == "EUREKA":
        _api_accounts_on = settings.EUREKA.access.api_auth


setting_changed.connect(_follow_setting)


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
    accounts are on and the request's credentials open nothing — wrong, or from an address or for a
    name that failed too often. That body is then never read: the view refuses the request (401,
    429) on its credentials alone, so an anonymous client cannot make the node buffer bodies. The
    verdict is the credential cache's, so the view's own check that follows costs a lookup.

    A body sent with no credentials at all is answered here, 401 with the challenge as the view
    would, counted and logged as the view would (one line a minute): a flood of such requests then
    costs the node an answer each, not a view and a log line each."""
    if not _api_accounts_on:
        return True
    header = environ.get("HTTP_AUTHORIZATION")
    if not header:
        if not has_body(environ):
            return False
        address = client_address(_EnvironRequest(environ))
        accounts.note_refusal("unauthenticated", f"no credentials (with a request body) from {address}")
        return NO_CREDENTIALS
    try:
        accounts.authenticate(header, lambda: client_address(_EnvironRequest(environ)))
    except accounts.Busy as busy:
        # Not checked (too many password checks waiting): answered here, since the view's own check
        # could pass a moment later and then find the body unread.
        address = client_address(_EnvironRequest(environ))
        accounts.note_refusal("busy", f"{busy.reason} for {busy.username!r} from {address}")
        return EarlyAnswer(503, (("Retry-After", str(busy.retry_after)),))
    except accounts.Refused:
        return False
    return True


class BasicAccountAuthentication(BaseAuthentication):
    """HTTP Basic credentials of a Django user, as every Eureka client sends from its service URL."""

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        if not header:
            return None  # the permission check answers 401 with the challenge
        try:
            principal = accounts.authenticate(header, lambda: client_address(request))
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
        return principal, None

    def authenticate_header(self, request):
        return REALM


class RolePermission(BasePermission):
    """Reads need the reader role (or more), instance writes the client role, replication the peer role."""

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
            return True
        accounts.note_refusal(
            "forbidden",
            f"{user.username!r} lacks {needed} for {request.method} from {client_address(request)}",
        )
        return False
