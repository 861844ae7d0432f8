"""The admin's sign-in form (the console signs in there too), with failed sign-ins throttled.

Failures are counted per client address and per user name (registry/access/throttle.py, shared with API
Basic credentials); past the limit the form refuses at once, without checking the password, and says how
long to wait; the admin site answers such a refusal with 429 and Retry-After. When too many password
checks wait for a hashing slot already (registry/access/hashers.py) the form refuses without checking
either, and the site answers 503 with Retry-After; that is no failed sign-in.
"""

from __future__ import annotations

from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError

from registry.access import accounts
from registry.access.clients import client_address
from registry.access.hashers import HashingBusy, sign_in_checks


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "throttled": "Too many failed sign-ins from this address or for this user. "
        "Wait %(seconds)s seconds and try again.",
        "busy": "The server is checking too many sign-ins at the moment. Try again in a few seconds.",
    }

    # Seconds the client must wait, when this form refused it for too many failures (else 0).
    retry_after = 0
    # Seconds to wait, when the password could not be checked for the hashing queue being full (else 0).
    busy_retry_after = 0

    def clean(self):
        username = self.cleaned_data.get("username")
        if username is None or not self.cleaned_data.get("password"):
            return super().clean()
        throttle = accounts.signin_throttle()
        address = client_address(self.request)
        self.retry_after = throttle.wait(address, username)
        if self.retry_after:
            raise ValidationError(
                self.error_messages["throttled"], code="throttled", params={"seconds": self.retry_after}
            )
        try:
            with sign_in_checks():
                cleaned = super().clean()
        except HashingBusy as busy:
            self.busy_retry_after = busy.retry_after
            raise ValidationError(self.error_messages["busy"], code="busy") from None
        except ValidationError:
            # No user: the password was wrong or named nobody. A right password of an account that may
            # not use the admin (not staff) is refused too, but is no guess.
            if self.user_cache is None:
                throttle.failed(address, username)
            raise
        throttle.succeeded(username)
        return cleaned
