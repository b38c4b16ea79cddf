from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import ValidationError

from . import login_throttle
from .models import User


class ThrottledAdminLoginForm(AdminAuthenticationForm):
    """The admin console's login page, under the same failure counters as the API's login: a locked-out
    account or address is told so (the backend would refuse it anyway, with the generic message)."""

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        client_ip = login_throttle.client_address(self.request)
        if login_throttle.locked_out(username=username, client_ip=client_ip):
            minutes = -(-settings.GATEWAY_LOGIN_FAILURE_WINDOW_SECONDS // 60)
            raise ValidationError(
                f"Too many failed sign-in attempts; try again in {minutes} minutes.",
                code="too_many_login_attempts",
            )
        return super().clean()


admin.site.login_form = ThrottledAdminLoginForm


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    ordering = ("email",)
    list_display = ("email", "first_name", "last_name", "is_staff", "is_active", "date_joined")
    search_fields = ("email", "first_name", "last_name")
    fieldsets = (
        (None, {"fields": ("email", "password")}),
        ("Personal info", {"fields": ("first_name", "last_name")}),
        ("Permissions", {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")}),
        ("Important dates", {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)
