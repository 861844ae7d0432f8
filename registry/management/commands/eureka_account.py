"""``manage.py eureka_account NAME --role client|reader|peer``: an API account from a script.

Creates the Django user or updates it (role, password, enabled), so a deploy recipe can run it on
every start. The password comes from ``--password-file``, ``--password-stdin`` or the environment
variable ``EUREKA_ACCOUNT_PASSWORD``, never from the command line (it would show in ``ps``); with
none of them a new account gets a generated password, printed once.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from registry.access.roles import ROLE_GROUPS

PASSWORD_ENV = "EUREKA_ACCOUNT_PASSWORD"


class Command(BaseCommand):
    help = "Create or update an API account (a Django user) with the client, reader or peer role."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=sorted(ROLE_GROUPS))
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

    def handle(self, *args, **options):
        username = options["username"].strip()
        if not username or ":" in username:
            raise CommandError("An account name must be non-empty and hold no ':' (Basic credentials)")
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
        state = "created" if created else "updated"
        enabled = "disabled" if options["disable"] else "enabled"
        self.stdout.write(f"Account {username!r} {state}: role {options['role']}, {enabled}.")
        if generated:
            self.stdout.write(f"Generated password (shown once): {generated}")
