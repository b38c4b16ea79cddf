"""Organization scoping for every management viewset, in one place.

``OrganizationScopedViewSet`` filters every queryset to the caller's organization and checks the
caller's role; subclasses say what they list with ``get_base_queryset`` and cannot override
``get_queryset`` (refused at class creation), so no view can forget the filter.
"""

import uuid

from rest_framework import permissions, serializers, viewsets

from apps.organizations.models import Organization, Role


class HasOrganizationRole(permissions.BasePermission):
    """Reading needs ``view.read_role`` (default member); changing needs ``view.write_role``
    (default admin)."""

    message = "Your role in this organization does not allow this."

    def has_permission(self, request, view) -> bool:
        context = request.auth
        membership = getattr(context, "membership", None)
        if membership is None:
            return False
        if request.method in permissions.SAFE_METHODS:
            required = getattr(view, "read_role", Role.MEMBER)
        else:
            required = getattr(view, "write_role", Role.ADMIN)
        return membership.has_role(required)


class OrganizationScopedMixin:
    permission_classes = [permissions.IsAuthenticated, HasOrganizationRole]
    read_role = Role.MEMBER
    write_role = Role.ADMIN
    # The field that ties a row to its organization ("id" for the organization itself).
    organization_field = "organization_id"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides get_queryset; override get_base_queryset instead so the "
                "organization filter always applies."
            )

    @property
    def organization(self) -> Organization:
        return self.request.auth.organization

    def get_base_queryset(self):
        return self.queryset.all()

    def get_queryset(self):
        return self.get_base_queryset().filter(**{self.organization_field: self.organization.pk})

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if getattr(self.request, "auth", None) is not None:
            context["organization"] = self.organization
        return context


class OrganizationScopedViewSet(OrganizationScopedMixin, viewsets.GenericViewSet):
    pass


class OrganizationScopedRelatedField(serializers.PrimaryKeyRelatedField):
    """A foreign key that only accepts objects of the caller's organization. Another
    organization's id reads exactly like an id that does not exist."""

    default_error_messages = {
        "does_not_exist": "No such object in this organization.",
        "incorrect_type": "Expected an id string, received {data_type}.",
    }

    def get_queryset(self):
        return super().get_queryset().filter(organization=self.context["organization"])

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("incorrect_type", data_type=type(data).__name__)
        try:
            uuid.UUID(data)
        except ValueError:
            self.fail("does_not_exist", pk_value=data)
        return super().to_internal_value(data)
