"""Regenerate docs/configuration.md's tables of settings from their declarations (registry/config/docs.py)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from registry.config.docs import render_page

PAGE = Path(settings.BASE_DIR) / "docs" / "configuration.md"


class Command(BaseCommand):
    help = "Write the settings tables into docs/configuration.md (--check: fail if they are out of date)."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="Change nothing; fail if the page differs.")

    def handle(self, *args, check=False, **options):
        current = PAGE.read_text()
        page = render_page(current)
        if page == current:
            self.stdout.write("docs/configuration.md is up to date")
        elif check:
            raise CommandError("docs/configuration.md is out of date: run manage.py configuration_docs")
        else:
            PAGE.write_text(page)
            self.stdout.write("docs/configuration.md written")
