from django.urls import path

from .views import LogoutView, PasswordChangeView, RefreshView

urlpatterns = [
    path("auth/refresh", RefreshView.as_view(), name="auth-refresh"),
    path("auth/logout", LogoutView.as_view(), name="auth-logout"),
    path("auth/password", PasswordChangeView.as_view(), name="auth-password"),
]
