from django import forms
from django.contrib import admin
from django.core.validators import RegexValidator
from django.db import transaction

from apps.core.generations import bump_generation

from . import services
from .api.serializers import ALIAS_MESSAGE, ALIAS_PATTERN
from .models import Deployment, ModelAlias, ModelPrice


class DeploymentInline(admin.TabularInline):
    model = Deployment
    extra = 1


class ModelAliasForm(forms.ModelForm):
    """The API's rules: an alias cannot read as provider/model, and fallbacks name other aliases of
    the same organization."""

    alias = forms.CharField(max_length=200, validators=[RegexValidator(ALIAS_PATTERN, ALIAS_MESSAGE)])

    class Meta:
        model = ModelAlias
        fields = ("organization", "alias", "description", "fallbacks", "is_active")

    def clean(self):
        cleaned = super().clean()
        organization = cleaned.get("organization") or getattr(self.instance, "organization", None)
        alias = cleaned.get("alias")
        fallbacks = cleaned.get("fallbacks") or []
        if not isinstance(fallbacks, list) or not all(isinstance(name, str) for name in fallbacks):
            self.add_error("fallbacks", 'A list of alias names, for example ["gpt-4o-mini"].')
        elif alias in fallbacks:
            self.add_error("fallbacks", "An alias cannot fall back to itself.")
        elif organization is not None:
            known = set(
                ModelAlias.objects.filter(organization=organization, alias__in=fallbacks).values_list(
                    "alias", flat=True
                )
            )
            missing = [name for name in fallbacks if name not in known]
            if missing:
                self.add_error("fallbacks", f"No such model alias: {', '.join(missing)}.")
        # Checked here because Django skips the (organization, alias) constraint once organization
        # is read-only, and the database would refuse the row with an error page.
        taken = ModelAlias.objects.filter(organization=organization, alias=alias).exclude(pk=self.instance.pk)
        if alias and organization is not None and taken.exists():
            self.add_error("alias", "This organization has a model alias with that name already.")
        if not self.instance._state.adding and "alias" in self.changed_data:
            users = services.aliases_falling_back_to(self.instance)  # still the old name here
            if users:
                self.add_error("alias", f"Other aliases fall back to this one ({', '.join(users)}).")
        return cleaned


@admin.register(ModelAlias)
class ModelAliasAdmin(admin.ModelAdmin):
    form = ModelAliasForm
    list_display = ("alias", "organization", "is_active", "updated_at")
    list_filter = ("organization", "is_active")
    search_fields = ("alias", "organization__name")
    inlines = (DeploymentInline,)

    def get_readonly_fields(self, request, obj=None):
        # Fallbacks name aliases of the alias's own organization; it cannot move.
        return ("organization",) if obj is not None else ()

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        bump_generation(form.instance.organization_id)

    def get_deleted_objects(self, objs, request):
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        deleting = {model_alias.alias for model_alias in objs}
        for model_alias in objs:
            protected.extend(
                f"{user} (falls back to {model_alias.alias})"
                for user in services.aliases_falling_back_to(model_alias)
                if user not in deleting
            )
        return deleted, counts, perms_needed, protected

    def delete_model(self, request, obj: ModelAlias) -> None:
        services.model_alias_delete(model_alias=obj)

    @transaction.atomic
    def delete_queryset(self, request, queryset) -> None:
        # get_deleted_objects refused the batch if an alias outside it falls back to one inside.
        organization_ids = set(queryset.values_list("organization_id", flat=True))
        super().delete_queryset(request, queryset)
        for organization_id in organization_ids:
            bump_generation(organization_id)


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    """Price versions are added, never edited: a past request's cost must stay recomputable."""

    list_display = (
        "provider",
        "model",
        "organization",
        "input_per_mtok",
        "output_per_mtok",
        "effective_from",
    )
    list_filter = ("provider", "organization")
    search_fields = ("model", "organization__name")

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            return [field.name for field in ModelPrice._meta.fields]
        return ()

    def save_model(self, request, obj, form, change) -> None:
        if change:
            return
        fields = {name: form.cleaned_data[name] for name in form.fields if name != "organization"}
        created = services.model_price_create(organization=form.cleaned_data["organization"], **fields)
        obj.pk, obj._state.adding = created.pk, False

    def delete_model(self, request, obj: ModelPrice) -> None:
        services.model_price_delete(price=obj)

    @transaction.atomic
    def delete_queryset(self, request, queryset) -> None:
        organization_ids = set(queryset.values_list("organization_id", flat=True))
        super().delete_queryset(request, queryset)
        for organization_id in organization_ids:
            bump_generation(organization_id)
