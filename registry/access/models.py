"""What an API account holds beside its user row: the certificate names that identify it and the apps it
may write. Imported by ``registry/models.py`` so it belongs to the ``registry`` app and its migrations.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from registry.access.certificates import normalise_name
from registry.access.grants import BadGrant, format_grants, parse_grants

MAX_CERTIFICATE_NAME_CHARS = 500


def parse_certificate_names(text: str) -> tuple[str, ...]:
    """One name a line (blank lines skipped), duplicates (in any case) dropped, in the order given;
    ``ValidationError`` for a name too long or holding a control character."""
    names: list[str] = []
    seen: set[str] = set()
    for line in (text or "").splitlines():
        name = line.strip()
        if not name:
            continue
        if len(name) > MAX_CERTIFICATE_NAME_CHARS:
            raise ValidationError(
                f"The certificate name {name[:40]!r}... is longer than "
                f"{MAX_CERTIFICATE_NAME_CHARS} characters",
                code="invalid_certificate_name",
            )
        if not name.isprintable() or any(char.isspace() for char in name):
            raise ValidationError(
                f"The certificate name {name[:60]!r} holds whitespace or a control character: a SAN URI, "
                "a DNS name or a common name, one a line",
                code="invalid_certificate_name",
            )
        if normalise_name(name) not in seen:
            seen.add(normalise_name(name))
            names.append(name)
    return tuple(names)


def validate_grants(value: str) -> None:
    try:
        parse_grants(value)
    except BadGrant as exc:
        raise ValidationError(str(exc), code="invalid_grant") from None


class ApiAccess(models.Model):
    """An API account's certificate names (a client certificate naming one of them signs in as the
    account) and its app grants (patterns of the apps a *client* account may write; none: every app).
    At most one per user; a user without one has neither."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_access")
    certificate_names = models.TextField(
        blank=True,
        help_text="One a line: a SAN URI (spiffe://…), a SAN DNS name or a subject common name of the "
        "client certificates that sign in as this account. Each name belongs to one account only.",
    )
    apps = models.TextField(
        "app grants",
        blank=True,
        validators=[validate_grants],
        help_text="Comma-separated app name patterns (any case, * and ? wildcards: ORDERS, PAYMENTS-*) "
        "this account may register, renew, cancel and change. Empty: every app. Ignored for peers.",
    )

    class Meta:
        verbose_name = "API access (certificate names, app grants)"
        verbose_name_plural = "API access (certificate names, app grants)"

    def __str__(self):
        return f"API access of {self.user}"

    def names(self) -> tuple[str, ...]:
        return parse_certificate_names(self.certificate_names)

    def grants(self) -> tuple[str, ...]:
        return parse_grants(self.apps)

    def clean(self):
        super().clean()
        names = parse_certificate_names(self.certificate_names)
        try:
            grants = parse_grants(self.apps)
        except BadGrant:
            grants = None  # the field's validator reports it
        taken = names_held_elsewhere(names, self.user_id)
        if taken:
            held = "; ".join(f"{name!r} is already held by account {who!r}" for name, who in taken)
            raise ValidationError({"certificate_names": held})
        # Stored the way they match: one name a line, grants upper-case without blanks.
        self.certificate_names = "\n".join(names)
        if grants is not None:
            self.apps = format_grants(grants)


def names_held_elsewhere(names: tuple[str, ...], user_id: int | None) -> list[tuple[str, str]]:
    """``(name, account)`` for each of ``names`` that another account's certificate names hold already."""
    wanted = {normalise_name(name): name for name in names}
    if not wanted:
        return []
    taken = []
    others = ApiAccess.objects.exclude(certificate_names="").select_related("user")
    if user_id is not None:
        others = others.exclude(user_id=user_id)
    for other in others:
        for held in other.names():
            if normalise_name(held) in wanted:
                taken.append((wanted[normalise_name(held)], other.user.get_username()))
    return taken
