from django import forms
from django.contrib import admin

from apps.core.admin_mixins import ReadOnlyAdmin, ServiceAdmin
from apps.core.errors import Conflict

from . import services
from .models import PromptLabel, PromptLabelMove, PromptTemplate, PromptVersion


class PromptTemplateForm(forms.ModelForm):
    class Meta:
        model = PromptTemplate
        fields = ("organization", "slug", "name", "description")


class VersionInline(admin.TabularInline):
    model = PromptVersion
    fields = ("number", "note", "created_by", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class LabelInline(admin.TabularInline):
    model = PromptLabel
    fields = ("name", "version", "updated_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(PromptTemplate)
class PromptTemplateAdmin(ServiceAdmin):
    """Writes go through the services: every proxy worker reloads its templates on its next request."""

    form = PromptTemplateForm
    list_display = ("slug", "name", "organization", "updated_at")
    list_filter = ("organization",)
    search_fields = ("slug", "name", "organization__name")
    readonly_fields = ("id", "created_at", "updated_at")
    inlines = (VersionInline, LabelInline)

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:  # versions and labels belong to the template's organization for good
            return (*self.readonly_fields, "organization")
        return self.readonly_fields

    def get_deleted_objects(self, objs, request):
        # Versions and the label history cannot be deleted on their own pages (no delete
        # permission there), which Django would read as forbidding the template's deletion too.
        deleted, counts, _perms_needed, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def service_create(self, request, form) -> PromptTemplate:
        values = {name: form.cleaned_data[name] for name in PromptTemplateForm.Meta.fields}
        organization = values.pop("organization")
        return services.template_create(organization=organization, data=values)

    def service_update(self, request, obj: PromptTemplate, form, changes: dict) -> None:
        if changes:
            services.template_update(template=obj, data=changes)

    def service_delete(self, request, obj: PromptTemplate) -> None:
        services.template_delete(template=obj)


class PromptVersionForm(forms.ModelForm):
    messages = forms.JSONField(help_text='[{"role": "system", "content": "You help {{customer}}."}]')
    variables = forms.JSONField(
        required=False, initial=list, help_text='[{"name": "customer", "default": "..."}]'
    )
    defaults = forms.JSONField(
        required=False, initial=dict, help_text='{"model": "gpt-4o-mini", "temperature": 0.2}'
    )

    class Meta:
        model = PromptVersion
        fields = ("template", "messages", "variables", "defaults", "note")


@admin.register(PromptVersion)
class PromptVersionAdmin(ServiceAdmin):
    """A version is created here through the service (checked and numbered) and never changed."""

    form = PromptVersionForm
    list_display = ("template", "number", "note", "created_by", "created_at")
    list_filter = ("template__organization",)
    search_fields = ("template__slug", "note")

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            return (
                "id",
                "template",
                "number",
                "messages",
                "variables",
                "defaults",
                "note",
                "created_by",
                "created_at",
            )
        return ("id",)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # a version goes only with its template

    def service_create(self, request, form) -> PromptVersion:
        data = form.cleaned_data
        return services.version_create(
            template=data["template"],
            data={
                "messages": data["messages"],
                "variables": data.get("variables") or [],
                "defaults": data.get("defaults") or {},
                "note": data.get("note") or "",
            },
            created_by=request.user,
        )

    def service_update(self, request, obj: PromptVersion, form, changes: dict) -> None:
        if changes:
            raise Conflict("A prompt version is immutable; create a new version instead.")

    def service_delete(self, request, obj: PromptVersion) -> None:
        raise Conflict("A prompt version is deleted only with its template.")


class PromptLabelForm(forms.ModelForm):
    class Meta:
        model = PromptLabel
        fields = ("template", "name", "version")


@admin.register(PromptLabel)
class PromptLabelAdmin(ServiceAdmin):
    """Setting, moving and removing a label goes through the services, which record the move."""

    form = PromptLabelForm
    list_display = ("template", "name", "version", "updated_at")
    list_filter = ("template__organization",)
    search_fields = ("template__slug", "name")

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            return ("template", "name")
        return ()

    def service_create(self, request, form) -> PromptLabel:
        data = form.cleaned_data
        return services.label_set(
            template=data["template"], name=data["name"], version=data["version"], user=request.user
        )

    def service_update(self, request, obj: PromptLabel, form, changes: dict) -> None:
        if "version" in changes:
            services.label_set(
                template=obj.template, name=obj.name, version=changes["version"], user=request.user
            )

    def service_delete(self, request, obj: PromptLabel) -> None:
        services.label_delete(label=obj, user=request.user)


@admin.register(PromptLabelMove)
class PromptLabelMoveAdmin(ReadOnlyAdmin):
    """The label history: read only."""

    list_display = ("template", "label", "from_version", "to_version", "moved_by", "created_at")
    list_filter = ("template__organization",)
    search_fields = ("template__slug", "label")
