from django.contrib import admin

from .models import Event


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    """Events, read-only: the gateway alone writes them (apps/events/services.py)."""

    list_display = ("created_at", "type", "organization", "id")
    list_filter = ("type",)
    list_select_related = ("organization",)
    search_fields = ("=id",)
    show_full_result_count = False
    fields = ("id", "type", "organization", "created_at", "data")
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
