from rest_framework.routers import SimpleRouter

from .views import TeamViewSet

router = SimpleRouter(trailing_slash=False)
router.register("teams", TeamViewSet, basename="team")

urlpatterns = router.urls
