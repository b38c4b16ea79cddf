from django.contrib import admin

from .models import Deployment, ModelAlias, ModelPrice


class DeploymentInline(admin.TabularInline):
    model = Deployment
    extra = 1


@admin.register(ModelAlias)
class ModelAliasAdmin(admin.ModelAdmin):
    list_display = ("alias", "organization", "is_active", "updated_at")
    list_filter = ("organization", "is_active")
    search_fields = ("alias", "organization__name")
    inlines = (DeploymentInline,)

    def save_related(self, request, form, formsets, change) -> None:
        from apps.core.generations import bump_generation

        super().save_related(request, form, formsets, change)
        bump_generation(form.instance.organization_id)


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
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

    def save_model(self, request, obj, form, change) -> None:
        from apps.core.generations import bump_generation

        super().save_model(request, obj, form, change)
        bump_generation(obj.organization_id)
