from django.db.models import QuerySet

from .models import ApiKey


def api_key_by_digest(digest: str) -> ApiKey | None:
    """The proxy's look-up: one indexed read, with what authentication needs."""
    return (
        ApiKey.objects.select_related(None)
        .only(
            "id",
            "organization_id",
            "team_id",
            "key_prefix",
            "key_digest",
            "permissions",
            "allowed_data_regions",
            "is_active",
            "expires_at",
        )
        .filter(key_digest=digest)
        .first()
    )


def api_keys_of(organization_id) -> QuerySet[ApiKey]:
    """The organization's keys, newest first, with their team and limits (the console lists them)."""
    return ApiKey.objects.filter(organization_id=organization_id).select_related("team", "limits")
