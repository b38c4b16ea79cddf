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
