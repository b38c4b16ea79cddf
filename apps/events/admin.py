from django.contrib import admin

from apps.core.admin_mixins import ReadOnlyAdmin

from .models import Event


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    """Events, read-only: the gateway alone writes them (apps/events/services.py)."""

    list_display = ("created_at", "type", "organization", "id")
    list_filter = ("type",)
    list_select_related = ("organization",)
    search_fields = ("=id",)
    show_full_result_count = False
    fields = ("id", "type", "organization", "created_at", "data")
    readonly_fields = fields
