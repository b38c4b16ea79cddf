from rest_framework.routers import SimpleRouter

from .views import TeamMemberViewSet, TeamViewSet

router = SimpleRouter(trailing_slash=False)
router.register("teams", TeamViewSet, basename="team")
router.register(r"teams/(?P<team_id>[^/.]+)/members", TeamMemberViewSet, basename="team-member")

urlpatterns = router.urls
