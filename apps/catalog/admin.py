"""The catalog in the Django admin. Every write goes through the catalog's services, which parse the
input (apps/catalog/inputs.py) and check it: the forms pass what was typed, and show the services'
refusals on their fields (``model_alias_check``, ``model_price_check``)."""

from django import forms
from django.contrib import admin

from apps.core.admin_mixins import ServiceAdmin, service_errors_on
from apps.core.errors import Conflict

from . import services
from .models import Deployment, ModelAlias, ModelPrice

# An alias's writable fields on its form, as the services take them (inputs.py); its deployments are
# the inline's.
ALIAS_FIELDS = ("alias", "description", "fallbacks", "is_active")


class DeploymentInline(admin.TabularInline):
    """The alias's deployments, written by the alias's service write with the alias (replaced whole
    when a row changed), whose generation bump runs when it commits: the workers see the alias and
    its deployments together."""

    model = Deployment
    extra = 1


def _alias_values(form: forms.ModelForm, names) -> dict:
    values = {name: form.cleaned_data[name] for name in names if name in form.cleaned_data}
    if "fallbacks" in values and values["fallbacks"] is None:  # the field left empty: none
        values["fallbacks"] = []
    return values


class ModelAliasForm(forms.ModelForm):
    class Meta:
        model = ModelAlias
        fields = ("organization", *ALIAS_FIELDS)

    def clean(self):
        cleaned = super().clean()
        organization = cleaned.get("organization") or getattr(self.instance, "organization", None)
        if organization is None:
            return cleaned
        # The service's rules (an alias that cannot read as provider/model, fallbacks of other aliases
        # of the organization, a name taken, a rename of an alias others fall back to), shown on the
        # form's fields before the save asks the service again: the values typed, or those changed.
        adding = self.instance._state.adding
        names = ALIAS_FIELDS if adding else [name for name in self.changed_data if name in ALIAS_FIELDS]
        with service_errors_on(self):
            try:
                services.model_alias_check(
                    organization_id=organization.pk,
                    data=_alias_values(self, names),
                    partial=True,  # the deployments are the inline's
                    model_alias=None if adding else ModelAlias.objects.get(pk=self.instance.pk),
                )
            except Conflict as error:  # a name taken, or in use
                self.add_error("alias", error.message)
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

    def save_model(self, request, obj, form, change) -> None:
        """Written in ``save_related``, with the inline's deployments, which Django has only there."""

    def save_related(self, request, form, formsets, change) -> None:
        (inline,) = formsets
        before = [] if not change else list(form.instance.deployments.all())
        # The deployments as the API's body has them: every row kept, when a row was added, changed
        # or deleted (an alias is created with its rows).
        form.deployments = None
        if not change or inline.has_changed():
            kept = [*inline.initial_forms, *(row for row in inline.extra_forms if row.has_changed())]
            form.deployments = [
                {name: row.cleaned_data[name] for name in ("provider", "upstream_model", "priority")}
                for row in kept
                if row not in inline.deleted_forms
            ]
        super().save_model(request, form.instance, form, change)
        # What the history shows: the rows replaced, or none.
        replaced = form.deployments is not None
        inline.new_objects = list(form.instance.deployments.all()) if replaced else []
        inline.changed_objects, inline.deleted_objects = [], before if replaced else []

    def service_create(self, request, form) -> ModelAlias:
        return services.model_alias_create(
            organization=form.cleaned_data["organization"],
            data={**_alias_values(form, ALIAS_FIELDS), "deployments": form.deployments},
        )

    def service_update(self, request, obj: ModelAlias, form, changes: dict) -> None:
        # ``obj`` carries the form's values already; the service compares with the stored row (a
        # rename of an alias others fall back to is refused).
        data = _alias_values(form, changes)
        if form.deployments is not None:
            data["deployments"] = form.deployments
        services.model_alias_update(model_alias=ModelAlias.objects.get(pk=obj.pk), data=data)

    def service_delete(self, request, obj: ModelAlias) -> None:
        services.model_alias_delete(model_alias=obj)

    def delete_queryset(self, request, queryset) -> None:
        # Together: an alias of the batch may fall back to another of it.
        services.model_alias_delete_many(model_aliases=queryset)


# A price version's writable fields, as the services take them (inputs.py).
PRICE_FIELDS = (
    "provider",
    "model",
    "input_per_mtok",
    "cached_input_per_mtok",
    "output_per_mtok",
    "reasoning_per_mtok",
    "effective_from",
)


def _price_values(form: forms.ModelForm) -> dict:
    """The prices as they were typed (the service parses them as the API does); an empty optional
    price is none."""
    return {
        name: form.cleaned_data[name]
        for name in PRICE_FIELDS
        if form.cleaned_data.get(name) not in (None, "")
    }


class ModelPriceForm(forms.ModelForm):
    input_per_mtok = forms.CharField()
    cached_input_per_mtok = forms.CharField(required=False)
    output_per_mtok = forms.CharField()
    reasoning_per_mtok = forms.CharField(required=False)

    class Meta:
        model = ModelPrice
        fields = ("organization", *PRICE_FIELDS)

    def clean(self):
        cleaned = super().clean()
        # The service's rules (a decimal string from 0, at most 6 places), shown on the form's fields
        # before the save asks the service again.
        with service_errors_on(self):
            services.model_price_check(data=_price_values(self), partial=True)
        return cleaned


@admin.register(ModelPrice)
class ModelPriceAdmin(ServiceAdmin):
    """Price versions are added, never edited: a past request's cost must stay recomputable."""

    form = ModelPriceForm

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
        return services.model_price_create(
            organization=form.cleaned_data["organization"], data=_price_values(form)
        )

    def service_update(self, request, obj: ModelPrice, form, changes: dict) -> None:
        """Every field is read-only on a stored version: there is nothing to write."""

    def service_delete(self, request, obj: ModelPrice) -> None:
        services.model_price_delete(price=obj)
