from django.db.models import Max, Prefetch
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.organizations.models import Role
from apps.organizations.tenancy import OrganizationScopedViewSet
from apps.prompts import selectors, services
from apps.prompts.inputs import VersionCreateSerializer
from apps.prompts.models import PromptLabel, PromptTemplate, PromptVersion

from .serializers import (
    LabelMoveSerializer,
    LabelSerializer,
    LabelSetSerializer,
    PromptTemplateSerializer,
    RenderedSerializer,
    RenderSerializer,
    VersionSerializer,
)

TEMPLATE_REFERENCE = OpenApiParameter(
    "id", str, OpenApiParameter.PATH, description="The template's id or slug."
)
TEMPLATE_ID = OpenApiParameter(
    "template_id", str, OpenApiParameter.PATH, description="The template's id or slug."
)
LABEL_NAME = OpenApiParameter(
    "name",
    str,
    OpenApiParameter.PATH,
    description="A label: lowercase letters, digits, '-' and '_', starting with a letter.",
    pattern=f"^{services.LABEL_PATTERN.pattern}$",
)


class TemplateLookupMixin:
    def find_template(self, reference: str) -> PromptTemplate:
        template = selectors.template_by_reference(selectors.templates_of(self.organization.pk), reference)
        if template is None:
            raise Http404
        return template


@extend_schema_view(
    retrieve=extend_schema(parameters=[TEMPLATE_REFERENCE]),
    partial_update=extend_schema(parameters=[TEMPLATE_REFERENCE]),
    destroy=extend_schema(parameters=[TEMPLATE_REFERENCE]),
    render=extend_schema(parameters=[TEMPLATE_REFERENCE]),
)
class PromptTemplateViewSet(
    TemplateLookupMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet
):
    """The organization's prompt templates (docs/prompts.md). Members read and render; admins and
    owners write. ``{id}`` is the template's id or its slug."""

    queryset = PromptTemplate.objects.all()
    serializer_class = PromptTemplateSerializer
    http_method_names = ["get", "post", "patch", "delete", "options"]
    lookup_value_regex = "[^/]+"
    # A slug taken.
    error_statuses = {"create": (409,), "partial_update": (409,)}

    @property
    def write_role(self) -> Role:
        # Rendering changes nothing: members may see what a set of variables produces.
        return Role.MEMBER if getattr(self, "action", None) == "render" else Role.ADMIN

    def get_base_queryset(self):
        labels = PromptLabel.objects.select_related("version").only("template_id", "name", "version__number")
        return self.queryset.prefetch_related(Prefetch("labels", queryset=labels)).annotate(
            latest_version=Max("versions__number")
        )

    def get_object(self) -> PromptTemplate:
        template = selectors.template_by_reference(self.get_queryset(), self.kwargs["pk"])
        if template is None:
            raise Http404
        self.check_object_permissions(self.request, template)
        return template

    def create(self, request):
        template = services.template_create(organization=self.organization, data=request.data)
        return Response(self.get_serializer(template).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request, pk=None):
        template = self.get_object()
        services.template_update(template=template, data=request.data)
        return Response(self.get_serializer(template).data)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        """Deletes the template with its versions, labels and label history."""
        services.template_delete(template=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=RenderSerializer, responses={200: RenderedSerializer})
    @action(detail=True, methods=["post"])
    def render(self, request, pk=None):
        """The messages and defaults a version (default: the ``production`` label) renders with these
        variables, exactly as the proxy would, without calling a model. Errors: 400
        ``prompt_not_found`` (version or label), ``prompt_variable_missing``,
        ``prompt_variable_unknown``, ``invalid_prompt``."""
        template = self.find_template(pk)
        serializer = RenderSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        rendered = selectors.template_render(template, **serializer.validated_data)
        return Response(
            RenderedSerializer(
                {
                    "template_id": rendered.template_id,
                    "slug": rendered.slug,
                    "version": rendered.version,
                    "label": rendered.label,
                    "messages": rendered.messages,
                    "defaults": rendered.defaults,
                }
            ).data
        )


@extend_schema(parameters=[TEMPLATE_ID])
class PromptVersionViewSet(
    TemplateLookupMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet
):
    """A template's versions: created, listed and read, never changed (a change is a new version)."""

    queryset = PromptVersion.objects.all()
    serializer_class = VersionSerializer
    organization_field = "template__organization_id"
    lookup_field = "number"
    lookup_value_regex = "[0-9]{1,10}"
    http_method_names = ["get", "post", "options"]
    # Versions of one template created at the same moment, beyond the retries.
    error_statuses = {"create": (409,)}

    def get_base_queryset(self):
        return self.queryset.filter(template=self.find_template(self.kwargs["template_id"])).select_related(
            "created_by"
        )

    @extend_schema(
        parameters=[OpenApiParameter("number", int, OpenApiParameter.PATH, description="The version number.")]
    )
    def retrieve(self, request, *args, **kwargs):
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(request=VersionCreateSerializer, responses={201: VersionSerializer})
    def create(self, request, template_id=None):
        """The template's next version. Refused (400 ``validation_error``, the field and the position
        named) when a content has a malformed tag or the declared variables differ from those the
        messages use."""
        template = self.find_template(template_id)
        version = services.version_create(template=template, data=request.data, created_by=request.user)
        return Response(VersionSerializer(version).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[TEMPLATE_ID])
class PromptLabelViewSet(TemplateLookupMixin, mixins.ListModelMixin, OrganizationScopedViewSet):
    """A template's labels: ``PUT`` sets or moves one, ``DELETE`` removes it, ``history`` lists every
    set, move and removal of it (who, when, from, to)."""

    queryset = PromptLabel.objects.all()
    serializer_class = LabelSerializer
    organization_field = "template__organization_id"
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    http_method_names = ["get", "put", "delete", "options"]
    # The label set by a concurrent request at the same moment.
    error_statuses = {"update": (409,)}

    def get_base_queryset(self):
        return self.queryset.filter(template=self.find_template(self.kwargs["template_id"])).select_related(
            "version"
        )

    @extend_schema(parameters=[LABEL_NAME], request=LabelSetSerializer, responses={200: LabelSerializer})
    def update(self, request, template_id=None, name=None):
        """Points the label at a version of the template, creating the label or moving it; the move is
        recorded. Requests that name the label get the new version at once, in every process."""
        template = self.find_template(template_id)
        serializer = LabelSetSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        label = services.label_set(
            template=template, name=name, version=serializer.validated_data["version"], user=request.user
        )
        return Response(LabelSerializer(label).data)

    @extend_schema(parameters=[LABEL_NAME], responses={204: None})
    def destroy(self, request, template_id=None, name=None):
        """Removes the label (recorded in its history); requests naming it then answer 400
        ``prompt_not_found``."""
        label = self.get_queryset().filter(name=name).first()
        if label is None:
            raise Http404
        services.label_delete(label=label, user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(parameters=[LABEL_NAME], responses={200: LabelMoveSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def history(self, request, template_id=None, name=None):
        """Every set, move and removal of the label, newest first; it outlives a removed label."""
        moves = selectors.label_history(self.find_template(template_id), name)
        if not moves.exists():
            raise Http404
        page = self.paginate_queryset(moves)
        return self.get_paginated_response(LabelMoveSerializer(page, many=True).data)
