from django import forms
from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from apps.core.admin_mixins import ServiceAdmin, service_errors_on
from apps.limits.selectors import budget_representation, rate_limits_representation

from . import services
from .models import DEFAULT_THRESHOLDS, Limits

# The service's fields (inputs.py) as this form names them.
FORM_FIELDS = {
    "budget.amount_usd": "budget_usd",
    "budget.period": "budget_period",
    "budget.starts_at": "budget_starts_at",
    "budget.ends_at": "budget_ends_at",
    "budget.thresholds": "budget_thresholds",
    "rate_limits.rpm": "rpm",
    "rate_limits.tpm": "tpm",
}


class ThresholdsField(forms.CharField):
    """Percents separated by commas or spaces (``50, 80, 100``); empty: the default."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("help_text", "Percents of the budget announced once per window, e.g. 50, 80, 100.")
        super().__init__(**kwargs)

    def prepare_value(self, value):
        return ", ".join(map(str, value)) if isinstance(value, list | tuple) else value

    def to_python(self, value) -> list[int]:
        words = super().to_python(value).replace(",", " ").split()
        try:
            return [int(word) for word in words] if words else list(DEFAULT_THRESHOLDS)
        except ValueError:
            raise forms.ValidationError("Whole percents separated by commas, e.g. 50, 80, 100.") from None

    def has_changed(self, initial, data) -> bool:
        try:
            return list(initial or ()) != self.to_python(data)
        except forms.ValidationError:
            return True


class LimitsForm(forms.ModelForm):
    budget_thresholds = ThresholdsField()

    class Meta:
        model = Limits
        fields = (
            "organization",
            "team",
            "api_key",
            "budget_usd",
            "budget_period",
            "budget_starts_at",
            "budget_ends_at",
            "budget_thresholds",
            "rpm",
            "tpm",
        )
        help_texts = {
            "team": "Leave team and API key empty for the organization's own limits.",
            "budget_usd": "Empty: no budget.",
            "budget_starts_at": "Fixed budgets only.",
            "rpm": "Requests per minute; empty for none, 0 refuses every request.",
            "tpm": "Tokens per minute; empty for none.",
        }

    def clean(self):
        cleaned = super().clean()
        # The service's rules (a team or a key of the organization, a fixed window's ends, thresholds
        # each once, something set when adding), shown on the form's fields before the save asks the
        # service again.
        with service_errors_on(self, aliases=FORM_FIELDS):
            services.limits_check(
                **self.target(),
                budget=self.budget(),
                rate_limits=self.rate_limits(),
                adding=self.instance._state.adding,
            )
        return cleaned

    def target(self) -> dict:
        """The organization, team and key the limits are of: the form's when adding, fixed after."""
        if not self.instance._state.adding:
            instance = self.instance
            return {"organization": instance.organization, "team": instance.team, "api_key": instance.api_key}
        return {name: self.cleaned_data.get(name) for name in ("organization", "team", "api_key")}

    def validate_unique(self) -> None:
        # One row per target: adding limits to a target that has some changes them (limits_set
        # finds the row), so the model's unique constraints are not a form error here.
        pass

    def budget(self) -> dict | None:
        data = self.cleaned_data
        if data.get("budget_usd") is None:
            return None
        return {
            "amount_usd": data["budget_usd"],
            "period": data.get("budget_period"),
            "starts_at": data.get("budget_starts_at"),
            "ends_at": data.get("budget_ends_at"),
            "thresholds": data.get("budget_thresholds"),
        }

    def rate_limits(self) -> dict | None:
        rpm, tpm = self.cleaned_data.get("rpm"), self.cleaned_data.get("tpm")
        return None if rpm is None and tpm is None else {"rpm": rpm, "tpm": tpm}


@admin.register(Limits)
class LimitsAdmin(ServiceAdmin):
    """Budgets and rate limits of organizations, teams and API keys. Every write is ``limits_set``:
    checked as the API checks it, and the generation is bumped, so the proxy applies it to the next
    request. Deleting removes both the budget and the rate limits."""

    form = LimitsForm
    list_display = ("__str__", "organization", "team", "api_key", "budget_usd", "budget_period", "rpm", "tpm")
    list_filter = ("budget_period", "organization")
    list_select_related = ("organization", "team", "api_key")
    search_fields = ("organization__name", "team__name", "api_key__name")
    readonly_fields = ("id", "created_at", "updated_at")

    def get_readonly_fields(self, request, obj=None):
        # What limits apply to is fixed once they exist: limits of another target are another row.
        if obj is not None:
            return (*self.readonly_fields, "organization", "team", "api_key")
        return self.readonly_fields

    def get_changeform_initial_data(self, request):
        # The Team, API key and Organization pages link here with their ids.
        return {
            name: request.GET[name] for name in ("organization", "team", "api_key") if name in request.GET
        }

    def service_create(self, request, form: LimitsForm) -> Limits:
        return services.limits_set(
            **form.target(), budget=form.budget(), rate_limits=form.rate_limits(), adding=True
        )

    def service_update(self, request, obj: Limits, form: LimitsForm, changes: dict) -> None:
        services.limits_set(**form.target(), budget=form.budget(), rate_limits=form.rate_limits())

    def service_delete(self, request, obj: Limits) -> None:
        services.limits_set(
            organization=obj.organization, team=obj.team, api_key=obj.api_key, budget=None, rate_limits=None
        )


def limits_summary(limits: Limits | None, **target) -> str:
    """For the Team, API key and Organization pages: their limits and a link to change them."""
    if limits is None:
        url = reverse("admin:limits_limits_add") + "?" + urlencode({k: str(v) for k, v in target.items()})
        return format_html('None. <a href="{}">Set a budget or rate limits</a>', url)
    budget, rates = budget_representation(limits), rate_limits_representation(limits)
    parts = []
    if budget:
        parts.append(f"budget {budget['amount_usd']} USD {budget['period']}")
    if rates:
        parts.append(f"rpm {rates['rpm']}, tpm {rates['tpm']}")
    url = reverse("admin:limits_limits_change", args=[limits.pk])
    return format_html('{} <a href="{}">Change</a>', "; ".join(parts), url)
