from django import forms
from django.contrib import admin
from django.core.validators import RegexValidator

from apps.core.admin_mixins import ServiceAdmin

from . import services
from .api.serializers import ALIAS_MESSAGE, ALIAS_PATTERN
from .models import Deployment, ModelAlias, ModelPrice


class DeploymentInline(admin.TabularInline):
    """Saved with the alias, in the transaction of the alias's service write, whose generation bump
    runs when it commits: the workers see the alias and its deployments together."""

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
        elif organization is not None and alias:
            # The service checks again when it writes; here the refusal shows beside the field.
            try:
                services.check_fallbacks(organization_id=organization.pk, alias=alias, fallbacks=fallbacks)
            except services.InvalidFallbacks as error:
                self.add_error("fallbacks", error.fields["fallbacks"])
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
class ModelAliasAdmin(ServiceAdmin):
    """Writes go through the catalog services: the fallbacks' rules hold, and every proxy worker
    sees the change on its next request (the configuration generation)."""

    form = ModelAliasForm
    list_display = ("alias", "organization", "is_active", "updated_at")
    list_filter = ("organization", "is_active")
    search_fields = ("alias", "organization__name")
    inlines = (DeploymentInline,)

    def get_readonly_fields(self, request, obj=None):
        # Fallbacks name aliases of the alias's own organization; it cannot move.
        return ("organization",) if obj is not None else ()

    def get_deleted_objects(self, objs, request):
        # The confirmation page lists what the service would refuse, so nothing is posted in vain.
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        for model_alias, users in services.fallback_users_outside(objs).items():
            protected.extend(f"{user} (falls back to {model_alias.alias})" for user in users)
        return deleted, counts, perms_needed, protected

    def service_create(self, request, form) -> ModelAlias:
        fields = {name: form.cleaned_data[name] for name in ModelAliasForm.Meta.fields}
        # The deployments are the inline's, saved next in the same transaction.
        return services.model_alias_create(deployments=(), **fields)

    def service_update(self, request, obj: ModelAlias, form, changes: dict) -> None:
        # ``obj`` carries the form's values already; the service compares with the stored row (a
        # rename of an alias others fall back to is refused).
        services.model_alias_update(model_alias=ModelAlias.objects.get(pk=obj.pk), **changes)

    def service_delete(self, request, obj: ModelAlias) -> None:
        services.model_alias_delete(model_alias=obj)

    def delete_queryset(self, request, queryset) -> None:
        # Together: an alias of the batch may fall back to another of it.
        services.model_alias_delete_many(model_aliases=queryset)


@admin.register(ModelPrice)
class ModelPriceAdmin(ServiceAdmin):
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

    def service_create(self, request, form) -> ModelPrice:
        return services.model_price_create(**{name: form.cleaned_data[name] for name in form.fields})

    def service_update(self, request, obj: ModelPrice, form, changes: dict) -> None:
        """Every field is read-only on a stored version: there is nothing to write."""

    def service_delete(self, request, obj: ModelPrice) -> None:
        services.model_price_delete(price=obj)
