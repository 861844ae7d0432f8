"""``manage.py eureka_account NAME --role client|reader|peer``: an API account from a script.

Creates the Django user or updates it (role, password, enabled, certificate names, app grants), so a
deploy recipe can run it on every start. The password comes from ``--password-file``,
``--password-stdin`` or the environment variable ``EUREKA_ACCOUNT_PASSWORD``, never from the command
line (it would show in ``ps``); with none of them a new account gets a generated password, printed
once. ``--certificate-name`` (repeated) and ``--apps`` replace the account's certificate names and
app grants; ``--clear-certificate-names`` and ``--clear-apps`` remove them; left out, they stay as
they are. ``eureka_account --list`` lists the API accounts.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from registry.access.grants import BadGrant, format_grants, parse_grants
from registry.access.models import ApiAccess, names_held_elsewhere, parse_certificate_names
from registry.access.roles import ROLE_GROUPS

PASSWORD_ENV = "EUREKA_ACCOUNT_PASSWORD"


class Command(BaseCommand):
    help = "Create or update an API account (a Django user) with the client, reader or peer role."

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?")
        parser.add_argument("--role", choices=sorted(ROLE_GROUPS), help="required unless --list")
        parser.add_argument(
            "--list",
            action="store_true",
            help="list the API accounts: role, state, certificate names, grants",
        )
        names = parser.add_mutually_exclusive_group()
        names.add_argument(
            "--certificate-name",
            action="append",
            dest="certificate_names",
            metavar="NAME",
            help="a client certificate's SAN URI, SAN DNS name or CN that signs in as this account "
            "(repeat for several; replaces the account's names)",
        )
        names.add_argument(
            "--clear-certificate-names", action="store_true", help="remove the account's certificate names"
        )
        apps = parser.add_mutually_exclusive_group()
        apps.add_argument(
            "--apps",
            metavar="PATTERNS",
            help="comma-separated app name patterns a client account may write, e.g. 'ORDERS,PAYMENTS-*' "
            "(replaces its grants)",
        )
        apps.add_argument(
            "--clear-apps",
            action="store_true",
            help="remove the account's app grants: it may write every app",
        )
        source = parser.add_mutually_exclusive_group()
        source.add_argument("--password-file", type=Path, help="read the password from this file")
        source.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
        parser.add_argument(
            "--disable", action="store_true", help="disable the account (its requests are refused)"
        )

    def _password(self, options) -> str | None:
        if options["password_file"]:
            try:
                password = options["password_file"].read_text().strip()
            except OSError as exc:
                raise CommandError(f"Cannot read the password file: {exc.strerror}") from None
        elif options["password_stdin"]:
            password = sys.stdin.readline().rstrip("\r\n")
        else:
            password = os.environ.get(PASSWORD_ENV)
            if password is None:
                return None
        if not password:
            raise CommandError("The password is empty")
        return password

    def _access_changes(self, options) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
        """The certificate names and grants to set (None: leave them), checked."""
        names = grants = None
        if options["certificate_names"] is not None:
            for name in options["certificate_names"]:
                if not name.strip() or len(name.strip().splitlines()) != 1:
                    raise CommandError(f"The certificate name {name!r} is empty or spans lines")
            try:
                names = parse_certificate_names("\n".join(options["certificate_names"]))
            except ValidationError as exc:
                raise CommandError(" ".join(exc.messages)) from None
        elif options["clear_certificate_names"]:
            names = ()
        if options["apps"] is not None:
            if options["role"] != "client":
                raise CommandError(
                    f"App grants scope client accounts only; a {options['role']} account is not scoped"
                )
            try:
                grants = parse_grants(options["apps"])
            except BadGrant as exc:
                raise CommandError(str(exc)) from None
            if not grants:
                raise CommandError("--apps is empty: use --clear-apps to let the account write every app")
        elif options["clear_apps"]:
            grants = ()
        return names, grants

    def _set_access(self, user, names, grants) -> ApiAccess | None:
        access = ApiAccess.objects.filter(user=user).first()
        if names is None and grants is None:
            return access
        if access is None:
            access = ApiAccess(user=user)
        if names is not None:
            taken = names_held_elsewhere(names, user.pk)
            if taken:
                raise CommandError(
                    "; ".join(
                        f"The certificate name {name!r} is already held by account {who!r}"
                        for name, who in taken
                    )
                )
            access.certificate_names = "\n".join(names)
        if grants is not None:
            access.apps = format_grants(grants)
        access.save()
        return access

    def _list(self) -> None:
        user_model = get_user_model()
        users = (
            user_model._default_manager.filter(groups__name__in=ROLE_GROUPS.values())
            .distinct()
            .order_by(user_model.USERNAME_FIELD)
            .select_related("api_access")
            .prefetch_related("groups")
        )
        for user in users:
            self.stdout.write(describe(user))

    def handle(self, *args, **options):
        if options["list"]:
            if options["username"]:
                raise CommandError("--list takes no account name")
            self._list()
            return
        if not options["username"] or not options["role"]:
            raise CommandError("Give an account name and --role (or --list)")
        username = options["username"].strip()
        if not username or ":" in username:
            raise CommandError("An account name must be non-empty and hold no ':' (Basic credentials)")
        names, grants = self._access_changes(options)
        password = self._password(options)
        user_model = get_user_model()
        try:
            role_group = Group.objects.get(name=ROLE_GROUPS[options["role"]])
        except Group.DoesNotExist:
            raise CommandError("The API roles are missing: run manage.py migrate first") from None
        generated = None
        with transaction.atomic():
            user, created = user_model._default_manager.get_or_create(**{user_model.USERNAME_FIELD: username})
            if password is None and created:
                generated = password = secrets.token_urlsafe(24)
            if password is not None:
                user.set_password(password)
            user.is_active = not options["disable"]
            user.save()
            user.groups.remove(*Group.objects.filter(name__in=ROLE_GROUPS.values()))
            user.groups.add(role_group)
            self._set_access(user, names, grants)
        state = "created" if created else "updated"
        self.stdout.write(f"Account {state}: {describe(user_model._default_manager.get(pk=user.pk))}")
        if generated:
            self.stdout.write(f"Generated password (shown once): {generated}")


def role_of(user) -> str:
    held = {group.name for group in user.groups.all()}
    return next((role for role, group in ROLE_GROUPS.items() if group in held), "none")


def describe(user) -> str:
    """One line of the listing: name, role, state, certificate names, app grants."""
    try:
        access = user.api_access
    except ApiAccess.DoesNotExist:
        access = None
    names = ", ".join(access.names()) if access else ""
    grants = access.apps if access and access.apps else ""
    role = role_of(user)
    # Grants scope client accounts only (a peer's are kept, unused, should it become a client again).
    scope = (grants or "every app") if role == "client" else "not scoped"
    return (
        f"{user.get_username()!r}: role {role}, {'enabled' if user.is_active else 'disabled'}, "
        f"certificate names: {names or 'none'}, apps: {scope}"
    )
