from django import forms
from django.contrib import admin
from django.template.response import TemplateResponse

from apps.core.admin_mixins import ReadOnlyAdmin, ServiceAdmin, service_errors_on
from apps.events.models import EventType

from . import services
from .models import ALL_EVENTS, Webhook, WebhookDelivery

# The writable fields, as the services take them (inputs.py), which check them.
FIELDS = ("url", "events", "description", "is_active")


class WebhookForm(forms.ModelForm):
    url = forms.CharField(help_text="An https:// URL.")
    events = forms.MultipleChoiceField(
        choices=[(ALL_EVENTS, "Every kind (*)"), *EventType.choices],
        widget=forms.CheckboxSelectMultiple,
        initial=[ALL_EVENTS],
    )

    class Meta:
        model = Webhook
        fields = ("organization", *FIELDS)

    def clean(self):
        cleaned = super().clean()
        # The service's rules (a URL whose addresses are allowed, ...), shown on the form's fields
        # before the save asks the service again: the values typed, or on a change those changed.
        names = FIELDS if self.instance._state.adding else self.changed_data
        with service_errors_on(self):
            services.webhook_check(
                data={name: cleaned[name] for name in names if name in cleaned and name in FIELDS},
                partial=True,
            )
        return cleaned


@admin.register(Webhook)
class WebhookAdmin(ServiceAdmin):
    """Every write goes through the services; the secret is shown once, on the page after adding."""

    form = WebhookForm
    list_display = ("url", "organization", "events", "is_active", "created_at")
    list_filter = ("is_active",)
    list_select_related = ("organization",)
    search_fields = ("url", "organization__name", "description")
    readonly_fields = ("id", "previous_secret_expires_at", "created_at", "updated_at")

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:  # a webhook never moves between organizations
            return (*self.readonly_fields, "organization")
        return self.readonly_fields

    def service_create(self, request, form) -> Webhook:
        webhook, secret = services.webhook_create(
            organization=form.cleaned_data["organization"],
            data={name: form.cleaned_data[name] for name in FIELDS},
        )
        form.instance._shown_once_secret = secret  # the object response_add is given
        return webhook

    def service_update(self, request, obj: Webhook, form, changes: dict) -> None:
        services.webhook_update(webhook=obj, data=changes)

    def service_delete(self, request, obj: Webhook) -> None:
        services.webhook_delete(webhook=obj)

    def response_add(self, request, obj, post_url_continue=None):
        # Rendered directly, not through a redirect and the messages framework, so the secret is
        # never written to a cookie or the session.
        context = {
            **self.admin_site.each_context(request),
            "webhook": obj,
            "secret": obj._shown_once_secret,
            "opts": self.opts,
        }
        return TemplateResponse(request, "admin/webhooks/webhook/created.html", context)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """The delivery history, read-only: attempts are made by the gateway alone."""

    list_display = (
        "created_at",
        "event_type",
        "attempt",
        "status",
        "response_status",
        "webhook",
        "organization",
    )
    list_filter = ("status", "event_type")
    list_select_related = ("webhook", "organization")
    search_fields = ("=id", "=event__id")
    show_full_result_count = False
    fields = (
        "id",
        "organization",
        "webhook",
        "event",
        "event_type",
        "attempt",
        "status",
        "response_status",
        "duration_ms",
        "failure_reason",
        "error",
        "created_at",
        "next_attempt_at",
    )
    readonly_fields = fields
