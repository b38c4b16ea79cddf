from rest_framework.routers import SimpleRouter

from .views import PromptLabelViewSet, PromptTemplateViewSet, PromptVersionViewSet

router = SimpleRouter(trailing_slash=False)
router.register("prompt-templates", PromptTemplateViewSet, basename="prompt-template")
router.register(
    r"prompt-templates/(?P<template_id>[^/]+)/versions", PromptVersionViewSet, basename="prompt-version"
)
router.register(
    r"prompt-templates/(?P<template_id>[^/]+)/labels", PromptLabelViewSet, basename="prompt-label"
)

urlpatterns = router.urls
