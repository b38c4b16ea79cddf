from django.urls import path
from rest_framework.routers import SimpleRouter

from .views import ExperimentViewSet, FeedbackView

router = SimpleRouter(trailing_slash=False)
router.register("experiments", ExperimentViewSet, basename="experiment")

urlpatterns = [*router.urls, path("feedback", FeedbackView.as_view(), name="feedback")]
