"""Forms of the console's instance filter and of the admin's override actions."""

from __future__ import annotations

from django import forms

from registry.admin.audit import REASON_MAX_CHARS, Action
from registry.console_data import STATUS_ORDER, BadQuery, InstanceQuery, parse_metadata_filter
from registry.domain import constants as c

PAGE_SIZES = (50, 100, 200, 500, 1000)


class InstanceFilterForm(forms.Form):
    """``?app=&instance=&status=&metadata=key=value&not_up=1&page=`` of the instances table."""

    app = forms.CharField(required=False, max_length=200, label="Application")
    instance = forms.CharField(required=False, max_length=200, label="Instance id, host or IP")
    status = forms.ChoiceField(
        required=False, choices=[("", "any status"), *[(s, s) for s in STATUS_ORDER]], label="Status"
    )
    metadata = forms.CharField(
        required=False, max_length=400, label="Metadata", help_text="key=value, or key alone"
    )
    not_up = forms.BooleanField(required=False, label="Not UP only")
    page = forms.IntegerField(required=False, min_value=1, max_value=1_000_000)
    per_page = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, choices=[(n, n) for n in PAGE_SIZES]
    )

    def clean_metadata(self):
        try:
            return parse_metadata_filter(self.cleaned_data["metadata"])
        except BadQuery as exc:
            raise forms.ValidationError(str(exc)) from None

    def query(self) -> InstanceQuery:
        """The filter of a valid form (call ``is_valid()`` first)."""
        data = self.cleaned_data
        key, value = data["metadata"]
        return InstanceQuery(
            app=data["app"].strip(),
            instance=data["instance"].strip(),
            status=data["status"],
            metadata_key=key,
            metadata_value=value,
            not_up=data["not_up"],
        )


class OverrideForm(forms.Form):
    """One operator action on one or more instances; a reason is required for the audit record."""

    action = forms.ChoiceField(choices=Action.choices)
    status = forms.ChoiceField(
        required=False,
        choices=[("", "---"), *[(s, s) for s in STATUS_ORDER]],
        help_text="Only for “Set status”.",
    )
    reason = forms.CharField(
        max_length=REASON_MAX_CHARS,
        strip=True,
        widget=forms.TextInput(attrs={"size": 60, "placeholder": "Why (kept in the audit log)"}),
    )

    def clean(self):
        data = super().clean()
        if data.get("action") == Action.SET_STATUS and data.get("status") not in c.STATUSES:
            self.add_error("status", "Choose the status to set.")
        return data
