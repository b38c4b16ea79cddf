from django import forms
from django.contrib import admin, messages

from apps.core.admin_mixins import ServiceAdmin
from apps.core.errors import GatewayError

from . import services
from .models import Experiment, Feedback, Variant


class ExperimentForm(forms.ModelForm):
    variants_json = forms.JSONField(
        label="Variants",
        help_text='[{"name": "control", "weight": 50}, {"name": "b", "weight": 50, "model": "other-alias"}]',
    )

    class Meta:
        model = Experiment
        fields = ("organization", "name", "target_model", "target_template")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["variants_json"].initial = [
                services.variant_values(variant) for variant in self.instance.variants.all()
            ]

    def experiment(self) -> dict:
        """The experiment as the services take it (apps/experiments/inputs.py), which check it: the
        variants' JSON is passed on as it was typed."""
        template = self.cleaned_data.get("target_template")
        if template is not None:
            target = {"prompt": str(template.id)}
        else:
            target = {"model": self.cleaned_data.get("target_model") or ""}
        return {
            "name": self.cleaned_data["name"],
            "target": target,
            "variants": self.cleaned_data["variants_json"],
        }


class VariantInline(admin.TabularInline):
    model = Variant
    fields = ("position", "name", "weight", "model", "prompt_version", "parameters")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Experiment)
class ExperimentAdmin(ServiceAdmin):
    """Writes go through the services (drafts only); the actions move experiments along."""

    form = ExperimentForm
    list_display = ("name", "organization", "status", "target_model", "target_template", "started_at")
    list_filter = ("status", "organization")
    search_fields = ("name", "organization__name")
    readonly_fields = (
        "id",
        "status",
        "started_at",
        "completed_at",
        "winner",
        "promoted_at",
        "promoted_by",
        "promotion",
        "created_at",
        "updated_at",
    )
    inlines = (VariantInline,)
    actions = ("start", "pause", "resume", "complete")

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            return (*self.readonly_fields, "organization")
        return self.readonly_fields

    def service_create(self, request, form) -> Experiment:
        return services.experiment_create(
            organization=form.cleaned_data["organization"], data=form.experiment()
        )

    def service_update(self, request, obj: Experiment, form, changes: dict) -> None:
        services.experiment_update(experiment=obj, data=form.experiment())

    def service_delete(self, request, obj: Experiment) -> None:
        services.experiment_delete(experiment=obj)

    def _each(self, request, queryset, service, done: str) -> None:
        for experiment in queryset:
            try:
                service(experiment=experiment)
            except GatewayError as error:
                self.message_user(request, f"{experiment}: {error.message}", messages.ERROR)
            else:
                self.message_user(request, f"{experiment}: {done}.", messages.SUCCESS)

    @admin.action(description="Start the selected drafts")
    def start(self, request, queryset):
        self._each(request, queryset, services.experiment_start, "started")

    @admin.action(description="Pause the selected experiments")
    def pause(self, request, queryset):
        self._each(request, queryset, services.experiment_pause, "paused")

    @admin.action(description="Resume the selected experiments")
    def resume(self, request, queryset):
        self._each(request, queryset, services.experiment_resume, "resumed")

    @admin.action(description="Complete the selected experiments (no winner)")
    def complete(self, request, queryset):
        self._each(request, queryset, services.experiment_complete, "completed")


@admin.register(Feedback)
class FeedbackAdmin(admin.ModelAdmin):
    """Read only: feedback is given by applications and members through the API."""

    list_display = ("request_id", "organization", "score", "label", "updated_at")
    list_filter = ("organization",)
    search_fields = ("request_id", "label")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
