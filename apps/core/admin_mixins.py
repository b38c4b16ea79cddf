"""Admin pages whose every write goes through the app's services.

Django's admin writes with the model's own ``save()`` and ``delete()``, around the services: the
organization's configuration generation (``apps/core/generations.py``) is not bumped, so proxy
workers keep serving the old configuration, and the services' rules (a team with active keys cannot
be deleted, ...) are skipped. ``ServiceAdmin`` sends add, change, delete and the bulk delete action to
three methods that each admin writes with its services, and shows a refusal from a service as an
error message on the page, never a server error.
"""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from django import forms
from django.contrib import admin, messages
from django.db import router, transaction
from django.http import HttpResponseRedirect
from django.urls import reverse

from apps.core.api.fields import REGION_PATTERN
from apps.core.errors import GatewayError, InvalidRequest
from apps.core.model_patterns import checked_model_patterns

_WRITES = ("service_create", "service_update", "service_delete")


@contextmanager
def service_errors_on(form: forms.Form, *, aliases: Mapping[str, str] | None = None) -> Iterator[None]:
    """A service's ``InvalidRequest`` inside, shown on the form's fields (``aliases``: the service's
    field name to the form's, such as ``team_id`` to ``team``), so a form adds no rule of its own."""
    try:
        yield
    except InvalidRequest as error:
        for field, messages_ in (error.fields or {error.param or "__all__": [error.message]}).items():
            name = (aliases or {}).get(field, field)
            form.add_error(name if name in form.fields else None, messages_)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the gateway writes itself (the audit log, events, feedback, label moves): shown, never
    added, changed or deleted here, so the record stays what happened."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ServiceAdmin(admin.ModelAdmin):
    """Subclasses define ``service_create(request, form) -> obj``, ``service_update(request, obj, form,
    changes)`` (``changes``: the changed model fields and their new values) and
    ``service_delete(request, obj)``; a class without all three is refused when it is created."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        missing = [name for name in _WRITES if not callable(getattr(cls, name, None))]
        if missing:
            raise TypeError(f"{cls.__name__} writes through the services: define {', '.join(missing)}.")

    def save_model(self, request, obj, form, change) -> None:
        if change:
            model_fields = {field.name for field in self.opts.concrete_fields}
            changes = {name: form.cleaned_data[name] for name in form.changed_data if name in model_fields}
            self.service_update(request, obj, form, changes)
            return
        created = self.service_create(request, form)
        # The admin goes on with ``obj`` (log entry, inlines, redirect): make it the saved row.
        obj.pk, obj._state.adding = created.pk, False

    def delete_model(self, request, obj) -> None:
        self.service_delete(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        # All or none: changelist_view rolls the batch back when a service refuses one of them.
        for obj in queryset:
            self.service_delete(request, obj)

    # The admin's views run their writes in a transaction; a refusal is caught outside it, so the
    # rows and the admin's log entries written before it are rolled back.

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except GatewayError as error:
            return self._refused(request, error, request.get_full_path())

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except GatewayError as error:
            change_url = reverse(
                f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change",
                args=[object_id],
            )
            return self._refused(request, error, change_url)

    def changelist_view(self, request, extra_context=None):
        if request.method != "POST":  # actions and list edits are posted
            return super().changelist_view(request, extra_context)
        try:
            with transaction.atomic(using=router.db_for_write(self.model)):
                return super().changelist_view(request, extra_context)
        except GatewayError as error:
            return self._refused(request, error, request.get_full_path())

    def _refused(self, request, error: GatewayError, url: str) -> HttpResponseRedirect:
        self.message_user(request, error.message, messages.ERROR)
        return HttpResponseRedirect(url)


class DataRegionsField(forms.CharField):
    """Data-region labels separated by commas or spaces (``us, eu``); empty means every region.
    The management API's rule (``apps/core/api/fields.py``), for admin forms."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault(
            "help_text", "Labels separated by commas, for example: us, eu. Empty allows every region."
        )
        super().__init__(**kwargs)

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value) -> list[str]:
        return sorted(set(super().to_python(value).replace(",", " ").split()))

    def validate(self, value: list[str]) -> None:
        super().validate(value)
        wrong = [label for label in value if not REGION_PATTERN.match(label)]
        if wrong:
            raise forms.ValidationError(
                f"{', '.join(wrong)}: not a data region label (lowercase letters, digits and hyphens, "
                "up to 32 characters)."
            )
        if len(value) > 50:
            raise forms.ValidationError("At most 50 data regions.")

    def has_changed(self, initial, data) -> bool:
        return sorted(initial or ()) != self.to_python(data)


class ModelPatternsField(forms.CharField):
    """A model allow-list (``apps/core/model_patterns.py``): aliases and provider/model patterns
    separated by commas or spaces; empty allows every model. Checked by the same rule the services
    apply (they check it again when they save)."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault(
            "help_text",
            "Model aliases and provider/model names, shell-style patterns allowed, separated by commas, "
            "for example: fast, openai/gpt-4o*. Empty allows every model.",
        )
        super().__init__(**kwargs)

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value) -> list[str]:
        return (super().to_python(value) or "").replace(",", " ").split()

    def validate(self, value: list[str]) -> None:
        try:
            checked_model_patterns(value)
        except GatewayError as error:
            raise forms.ValidationError(next(iter((error.fields or {}).values()), [error.message])) from None

    def has_changed(self, initial, data) -> bool:
        return list(initial or ()) != self.to_python(data)
