"""API accounts are Django users: credentials checked against the database, remembered in memory.

``authenticate`` is the entry point for Basic credentials, ``authenticate_certificate`` for a client
certificate (registry/access/certificates.py): each answers from the credential cache, rereads the
account row when the cached verdict is older than the recheck interval, and hashes a password (looks
a certificate's names up) only for credentials it has not seen (or whose account changed). Any
change to a user, a group, their permissions or an account's certificate names and app grants
(``ApiAccess``) made in this process (the admin, a management command run by the node) empties the
cache at once; changes made elsewhere are seen at the next recheck.
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password, make_password
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.db.models import Q
from django.db.models.signals import m2m_changed, post_delete, post_save

from registry.access import roles
from registry.access.certificates import ClientCertificate, normalise_name
from registry.access.credentials import CredentialCache, Principal, digest
from registry.access.hashers import HashingBusy, off_the_loop, sign_in_checks
from registry.access.throttle import SignInThrottle
from registry.domain.refusals import RefusalLines, refusal_fields, since_last_line

logger = logging.getLogger("registry.access")


class Refused(Exception):
    """Credentials that do not open the API; ``reason`` is safe to show (it never holds a secret)."""

    def __init__(self, reason: str, username: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.username = username


class TooManyFailures(Refused):
    """Too many failed sign-ins from this address or for this user name: refused without a check."""

    def __init__(self, retry_after: int, username: str = ""):
        super().__init__(f"too many failed sign-ins, try again in {retry_after} s", username)
        self.retry_after = retry_after


class Busy(Refused):
    """Too many password checks are waiting already (registry/access/hashers.py): these credentials
    were not checked, so they are neither remembered nor counted as a failed sign-in."""

    def __init__(self, retry_after: int, username: str = ""):
        super().__init__("too many password checks are waiting, not checked", username)
        self.retry_after = retry_after


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


_cache: CredentialCache | None = None
_cache_lock = threading.Lock()


def credential_cache() -> CredentialCache:
    global _cache
    if _cache is None:
        with _cache_lock:
            if _cache is None:
                _cache = CredentialCache(
                    _monotonic_ms,
                    recheck_ms=settings.EUREKA.access.api_auth_recheck_seconds * 1000,
                    refused_ms=min(2_000, settings.EUREKA.access.api_auth_recheck_seconds * 1000),
                )
    return _cache


def reset_credential_cache(cache: CredentialCache | None = None) -> None:
    """Tests: start from an empty cache (or a given one, with a fake clock)."""
    global _cache
    _cache = cache


_throttle: SignInThrottle | None = None


def signin_throttle() -> SignInThrottle:
    """Failed sign-ins of this process: API Basic credentials and the admin's (and console's) form."""
    global _throttle
    if _throttle is None:
        with _cache_lock:
            if _throttle is None:
                _throttle = SignInThrottle(
                    _monotonic_ms,
                    per_address=settings.EUREKA.access.signin_max_failures,
                    per_user=settings.EUREKA.access.signin_max_failures_per_user,
                    lockout_ms=settings.EUREKA.access.signin_lockout_seconds * 1000,
                )
    return _throttle


def reset_signin_throttle(throttle: SignInThrottle | None = None) -> None:
    """Tests: start with no failures counted (or with a given throttle, on a fake clock)."""
    global _throttle
    _throttle = throttle


def forget_verified_credentials(**kwargs) -> None:
    if _cache is not None:
        _cache.clear()


def decode_basic(header: str) -> tuple[str, str]:
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic" or not value.strip():
        raise Refused("the Authorization header is not HTTP Basic credentials")
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise Refused("malformed Basic credentials") from None
    username, colon, password = decoded.partition(":")
    if not colon or not username:
        raise Refused("malformed Basic credentials")
    return username, password


def _permissions(user) -> frozenset[str]:
    if not user.is_active:
        return frozenset()
    if user.is_superuser:
        return frozenset(roles.PERMISSIONS)
    granted = Permission.objects.filter(
        Q(user=user) | Q(group__user=user),
        content_type__app_label=roles.APP_LABEL,
        codename__in=list(roles.PERMISSIONS),
    ).values_list("codename", flat=True)
    return frozenset(granted)


_NO_ACCOUNT_HASH: str | None = None


def _check(password: str, encoded: str) -> bool:
    # Off the event loop: PBKDF2 releases the GIL, so other requests go on meanwhile (any configured
    # hasher; the default one also offloads itself, registry/access/hashers.py).
    return off_the_loop(check_password, password, encoded)


def _password_matches(password: str, encoded: str | None) -> bool:
    global _NO_ACCOUNT_HASH
    if encoded is None:
        # An unknown account name costs the same time as a wrong password: names are not probed.
        if _NO_ACCOUNT_HASH is None:
            _NO_ACCOUNT_HASH = make_password("unknown account")
        _check(password, _NO_ACCOUNT_HASH)
        return False
    return _check(password, encoded)


@dataclass(frozen=True)
class _Account:
    user_id: int
    username: str
    password: str
    is_active: bool
    permissions: frozenset[str]
    apps: tuple[str, ...] = ()
    # Normalised (certificates.normalise_name).
    certificate_names: frozenset[str] = frozenset()

    def principal(self) -> Principal:
        return Principal(self.user_id, self.username, self.permissions, self.apps)


def _read_account(user) -> _Account:
    from registry.access.models import ApiAccess

    try:
        access = user.api_access
    except ApiAccess.DoesNotExist:
        apps, names = (), frozenset()
    else:
        # Stored checked (the admin's form, the command); one made otherwise and unreadable grants
        # nothing rather than everything.
        try:
            apps = access.grants()
        except ValueError:
            apps = ("",)
        names = frozenset(normalise_name(name) for name in access.names())
    return _Account(
        user.pk, user.get_username(), user.password, user.is_active, _permissions(user), apps, names
    )


def _account(**lookup) -> _Account | None:
    """The account row, its API permissions, certificate names and app grants, read in one go on a
    connection closed afterwards.

    Protocol requests run on the lean handler, which sends no ``request_finished``: nothing would close
    a connection opened here, and each greenlet (one per client connection) would keep its own open
    until the client left — enough, with a fleet, to exhaust a PostgreSQL server's connections.
    """
    user_model = get_user_model()
    try:
        user = user_model._default_manager.filter(**lookup).select_related("api_access").first()
        if user is None:
            return None
        return _read_account(user)
    finally:
        if not connection.in_atomic_block:
            connection.close()


def _accounts_holding(names: tuple[str, ...]) -> tuple[_Account | None, str]:
    """The account whose certificate names hold the first of ``names`` any account holds, and that
    name; ``(None, "")`` when none does. Read on a connection closed afterwards (see ``_account``)."""
    from registry.access.models import ApiAccess

    try:
        holders: dict[str, ApiAccess] = {}
        for access in ApiAccess.objects.exclude(certificate_names="").select_related("user"):
            for held in access.names():
                holders.setdefault(normalise_name(held), access)
        for name in names:
            access = holders.get(normalise_name(name))
            if access is not None:
                return _read_account(access.user), normalise_name(name)
        return None, ""
    finally:
        if not connection.in_atomic_block:
            connection.close()


class _OneCheckAtATime:
    """Requests carrying the same unseen credentials wait for one check instead of each hashing: a
    fleet that starts together would otherwise queue a hash per connection (half a second each)."""

    def __init__(self):
        self._guard = threading.Lock()
        self._locks: dict[bytes, list] = {}

    @contextmanager
    def __call__(self, key: bytes):
        with self._guard:
            entry = self._locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._guard:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._locks[key]


_one_check_at_a_time = _OneCheckAtATime()


def _password_holds(account: _Account, proof: str) -> bool:
    return account.password == proof


def _remembered(
    cache: CredentialCache,
    key: bytes,
    now: int,
    holds: Callable[[_Account, str], bool] = _password_holds,
    refusal: str = "wrong user name or password",
) -> Principal | None:
    """The remembered answer (or ``Refused``), None when the credentials must be checked. At the
    recheck the account must still be active and ``holds`` its verdict's proof."""
    verdict = cache.lookup(key)
    if verdict is None:
        return None
    if cache.is_fresh(verdict, now):
        if verdict.principal is None:
            raise Refused(refusal)
        return verdict.principal
    if verdict.principal is not None:
        # Still the same account, password (certificate name) and standing? Then no need to hash again.
        account = _account(pk=verdict.principal.user_id)
        if account is not None and account.is_active and holds(account, verdict.proof):
            principal = account.principal()
            cache.remember(key, principal, verdict.proof, now)
            return principal
    cache.forget(key)
    return None


def authenticate(header: str, client: Callable[[], str] = lambda: "") -> Principal:
    """The account behind an ``Authorization`` header, or ``Refused`` (``TooManyFailures`` when the
    client's address or the user name failed too often lately, ``Busy`` when too many checks wait for
    a hashing slot: in both cases no password is checked).

    ``client`` gives the address, asked only for credentials not remembered (not on a heartbeat's way)."""
    cache = credential_cache()
    key = digest(header)
    principal = _remembered(cache, key, cache.clock())
    if principal is not None:
        return principal
    username, password = decode_basic(header)
    throttle = signin_throttle()
    address = client()
    wait = throttle.wait(address, username)
    if wait:
        raise TooManyFailures(wait, username)
    with _one_check_at_a_time(key):
        # Another request may have checked these credentials while this one waited.
        principal = _remembered(cache, key, cache.clock())
        if principal is not None:
            return principal
        account = _account(**{get_user_model().USERNAME_FIELD: username})
        try:
            with sign_in_checks():
                matches = _password_matches(password, account.password if account else None)
        except HashingBusy as busy:
            raise Busy(busy.retry_after, username) from None
        now = cache.clock()
        if account is None or not matches or not account.is_active:
            cache.remember(key, None, "", now)
            throttle.failed(address, username)
            raise Refused("wrong user name or password", username)
        throttle.succeeded(username)
        principal = account.principal()
        cache.remember(key, principal, account.password, now)
        return principal


UNKNOWN_CERTIFICATE = "the client certificate names no account"


def _certificate_name_holds(account: _Account, proof: str) -> bool:
    return proof in account.certificate_names


def authenticate_certificate(certificate: ClientCertificate) -> Principal:
    """The account one of the certificate's names (SAN URIs, SAN DNS names, subject CN, in that order)
    belongs to, or ``Refused``: no account holds any of them, or it is disabled. A certificate was
    verified by the TLS server (or the trusted proxy): no guess, so nothing is counted as a failed
    sign-in, and nothing is hashed."""
    cache = credential_cache()
    key = b"x509:" + certificate.key
    principal = _remembered(cache, key, cache.clock(), _certificate_name_holds, UNKNOWN_CERTIFICATE)
    if principal is not None:
        return principal
    account, name = _accounts_holding(certificate.names)
    now = cache.clock()
    if account is None or not account.is_active:
        cache.remember(key, None, "", now)
        who = f" (account {account.username!r} is disabled)" if account is not None else ""
        raise Refused(f"{UNKNOWN_CERTIFICATE}{who}: {', '.join(certificate.names) or 'it has no name'}")
    principal = account.principal()
    cache.remember(key, principal, name, now)
    return principal


_refusal_lines: RefusalLines | None = None


def refusal_lines() -> RefusalLines:
    """Which API refusals get a log line: at most one per reason each EUREKA_REFUSAL_LOG_INTERVAL_SECONDS."""
    global _refusal_lines
    if _refusal_lines is None:
        _refusal_lines = RefusalLines(settings.EUREKA.process.refusal_log_interval_seconds)
    return _refusal_lines


def reset_refusal_lines(lines: RefusalLines | None = None) -> None:
    """Tests: start with no refusal logged yet (or with given lines, on a fake clock)."""
    global _refusal_lines
    _refusal_lines = lines


# Refused requests by reason since start, read by /metrics at scrape time (eureka_auth_refusals_total).
REFUSALS = {"unauthenticated": 0, "forbidden": 0, "throttled": 0, "busy": 0}


def note_refusal(reason: str, detail: str) -> None:
    """Count and log a refused API request; ``reason`` is "unauthenticated", "forbidden", "throttled"
    or "busy"."""
    REFUSALS[reason] += 1
    count = refusal_lines().note(reason)
    if count:
        logger.warning(
            "API request refused (%s): %s%s",
            reason,
            detail,
            since_last_line(count),
            extra=refusal_fields(reason, count),
        )


def connect_signals() -> None:
    from registry.access.models import ApiAccess

    user_model = get_user_model()
    for model in (user_model, Group, Permission, ApiAccess):
        post_save.connect(forget_verified_credentials, sender=model, dispatch_uid=f"access-{model}-save")
        post_delete.connect(forget_verified_credentials, sender=model, dispatch_uid=f"access-{model}-del")
    for through in (
        user_model.groups.through,
        user_model.user_permissions.through,
        Group.permissions.through,
    ):
        m2m_changed.connect(forget_verified_credentials, sender=through, dispatch_uid=f"access-{through}")
