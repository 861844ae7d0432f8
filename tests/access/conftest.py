"""Fixtures the access tests share."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from registry.access import accounts
from registry.access.credentials import CredentialCache
from tests.access.test_api_auth import FAST_HASHER
from tests.conftest import FakeClock


@pytest.fixture
def auth_on():
    """API accounts on, with a credential cache of its own on a fake clock (test_api_auth.py has one
    of its own that also sets that clock)."""
    cache = CredentialCache(FakeClock(0), recheck_ms=5_000, refused_ms=2_000)
    accounts.reset_credential_cache(cache)
    with override_settings(
        EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER
    ):
        yield cache
    accounts.reset_credential_cache(None)
