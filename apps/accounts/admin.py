from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import ValidationError

from . import login_throttle
from .models import User
from .services import account_reclaim


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
    """An account the operator adds has a verified address (the operator names it). One made through
    an invitation link has not: the operator who has checked who owns the address hands the account to
    them with the "reclaim" action (docs/security.md, "Squatting an address through an invitation
    link"), then sets a password for them here or lets them sign in with single sign-on."""

    ordering = ("email",)
    list_display = (
        "email",
        "first_name",
        "last_name",
        "email_verified",
        "is_staff",
        "is_active",
        "date_joined",
    )
    list_filter = ("email_verified", "is_staff", "is_superuser", "is_active")
    search_fields = ("email", "first_name", "last_name")
    readonly_fields = ("email_verified",)
    actions = ("reclaim",)
    fieldsets = (
        (None, {"fields": ("email", "email_verified", "password")}),
        ("Personal info", {"fields": ("first_name", "last_name")}),
        ("Permissions", {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")}),
        ("Important dates", {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)

    def save_model(self, request, obj: User, form, change: bool) -> None:
        if not change:
            obj.email_verified = True  # the operator names the address
        super().save_model(request, obj, form, change)

    @admin.action(
        description="Reclaim for the address's owner: end the password, two-factor, sessions and "
        "memberships, and mark the address verified",
        permissions=["change"],
    )
    def reclaim(self, request, queryset) -> None:
        for user in queryset.exclude(pk=request.user.pk):  # never the operator's own, mid-session
            account_reclaim(user=user)
        self.message_user(
            request,
            "Reclaimed. Set a password for each account (Change password, on its page) and give it to the "
            "address's owner, or let them sign in with single sign-on; organizations invite them again.",
        )
