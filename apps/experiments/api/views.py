from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, permissions, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.experiments import services
from apps.experiments.inputs import ExperimentInputSerializer
from apps.experiments.models import Experiment
from apps.experiments.results import experiment_results
from apps.organizations.authentication import SessionTokenAuthentication
from apps.organizations.tenancy import OrganizationScopedViewSet

from .authentication import ApiKeyContext, FeedbackApiKeyAuthentication
from .serializers import (
    ExperimentSerializer,
    FeedbackInputSerializer,
    FeedbackSerializer,
    PendingFeedbackSerializer,
    PromoteSerializer,
)

ResultsSerializer = inline_serializer(
    "ExperimentResults",
    {
        "experiment": serializers.DictField(),
        "status": serializers.CharField(),
        "confidence": serializers.FloatField(),
        "minimum_sample_size": serializers.DictField(),
        "variants": serializers.ListField(child=serializers.DictField()),
        "comparisons": serializers.ListField(child=serializers.DictField()),
        "verdict": serializers.ChoiceField(
            choices=["not enough data", "no difference", "variant better", "variant worse"]
        ),
        "best_variant": serializers.CharField(allow_null=True),
    },
)


class ExperimentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """The organization's experiments (docs/experiments.md). Members read and see results; admins
    and owners write. A draft can be changed and deleted; start, pause, resume, complete and promote
    move it along."""

    queryset = Experiment.objects.all()
    serializer_class = ExperimentSerializer
    http_method_names = ["get", "post", "patch", "delete", "options"]
    error_statuses = {
        "partial_update": (409,),
        "destroy": (409,),
        "start": (409,),
        "pause": (409,),
        "resume": (409,),
        "complete": (409,),
        "promote": (409,),
    }

    def get_base_queryset(self):
        return self.queryset.select_related("target_template", "winner").prefetch_related("variants")

    @extend_schema(request=ExperimentInputSerializer, responses={201: ExperimentSerializer})
    def create(self, request):
        experiment = services.experiment_create(organization=self.organization, data=request.data)
        return self._answer(experiment, status.HTTP_201_CREATED)

    @extend_schema(request=ExperimentInputSerializer(partial=True), responses={200: ExperimentSerializer})
    def partial_update(self, request, pk=None):
        experiment = self.get_object()
        services.experiment_update(experiment=experiment, data=request.data)
        return self._answer(experiment)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.experiment_delete(experiment=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: ExperimentSerializer})
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        """draft -> running; 409 ``experiment_target_busy`` while another runs on the target."""
        return self._answer(services.experiment_start(experiment=self.get_object()))

    @extend_schema(request=None, responses={200: ExperimentSerializer})
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._answer(services.experiment_pause(experiment=self.get_object()))

    @extend_schema(request=None, responses={200: ExperimentSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._answer(services.experiment_resume(experiment=self.get_object()))

    @extend_schema(request=None, responses={200: ExperimentSerializer})
    @action(detail=True, methods=["post"])
    def complete(self, request, pk=None):
        return self._answer(services.experiment_complete(experiment=self.get_object()))

    @extend_schema(request=PromoteSerializer, responses={200: ExperimentSerializer})
    @action(detail=True, methods=["post"])
    def promote(self, request, pk=None):
        """Ends the experiment with the variant as its winner and moves the target to it."""
        experiment = self.get_object()
        serializer = PromoteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = request.user if request.user.is_authenticated else None
        services.experiment_promote(
            experiment=experiment, variant=serializer.validated_data["variant"], user=user
        )
        return self._answer(experiment)

    @extend_schema(responses={200: ResultsSerializer})
    @action(detail=True, methods=["get"])
    def results(self, request, pk=None):
        """Per variant: requests, errors, latency, time to first token, tokens, cost, feedback, each
        with a 95 % interval; comparisons against the control and a verdict (docs/experiments.md)."""
        return Response(experiment_results(self.get_object()))

    def _answer(self, experiment: Experiment, code: int = status.HTTP_200_OK) -> Response:
        fresh = self.get_base_queryset().get(pk=experiment.pk)
        return Response(self.get_serializer(fresh).data, status=code)


class FeedbackPermission(permissions.BasePermission):
    """An API key, or a session of any role in its organization."""

    def has_permission(self, request, view) -> bool:
        context = request.auth
        return isinstance(context, ApiKeyContext) or getattr(context, "membership", None) is not None


class FeedbackView(APIView):
    """``POST /api/v1/feedback``: a score and/or label (and a comment) on one request of the
    caller's organization, by its ``x-gateway-request-id``; with an API key, a request that key made.
    201 when created, 200 when it updated the request's feedback. A request whose audit entry is not
    written yet (the ingest writes it about a second after the answer): 202, ``status: pending``,
    attached when it is. The gateway cannot tell such an id from one it never answered, or from
    another key's or organization's request: those get the same 202 and are never recorded."""

    authentication_classes = [FeedbackApiKeyAuthentication, SessionTokenAuthentication]
    permission_classes = [FeedbackPermission]
    error_statuses = {"post": (429,)}

    @extend_schema(
        request=FeedbackInputSerializer,
        responses={200: FeedbackSerializer, 201: FeedbackSerializer, 202: PendingFeedbackSerializer},
    )
    def post(self, request):
        serializer = FeedbackInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        values = serializer.validated_data
        context = request.auth
        if isinstance(context, ApiKeyContext):
            organization_id, api_key_id, user = context.organization_id, context.api_key_id, None
        else:
            organization_id, api_key_id, user = context.organization.pk, None, request.user
        feedback, state = services.feedback_give(
            organization_id=organization_id,
            request_id=values["request_id"],
            score=values.get("score"),
            label=values.get("label"),
            comment=values.get("comment"),
            api_key_id=api_key_id,
            user=user,
        )
        if state == services.FEEDBACK_PENDING:
            return Response(PendingFeedbackSerializer(feedback).data, status=status.HTTP_202_ACCEPTED)
        return Response(
            FeedbackSerializer(feedback).data,
            status=status.HTTP_201_CREATED if state == services.FEEDBACK_CREATED else status.HTTP_200_OK,
        )
