"""Django-level handlers, so that errors raised outside DRF views still answer in the management
shape under /api/ (and as Django's plain pages elsewhere)."""

from django.http import HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from apps.core.api.exceptions import json_error_response


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


# Bearer tokens, not cookies, authenticate under /api/: an unknown path answers the JSON 404 for
# every method, never Django's HTML CSRF page.
@csrf_exempt
def api_not_found(request, *args, **kwargs) -> JsonResponse:
    return json_error_response(404, "not_found_error", "not_found", f"No endpoint at {request.path}.")


def handler404(request, exception=None):
    if _is_api(request):
        return api_not_found(request)
    return defaults.page_not_found(request, exception)


def handler500(request):
    if _is_api(request):
        return json_error_response(
            500, "api_error", "internal_error", "Something went wrong on our side; it has been logged."
        )
    return defaults.server_error(request)


def handler400(request, exception=None):
    if _is_api(request):
        return json_error_response(
            400, "invalid_request_error", "bad_request", "The request could not be read."
        )
    return defaults.bad_request(request, exception)


def healthz(request) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def favicon(request) -> HttpResponseRedirect:
    """The console's icon, under whatever name the static files' storage gives it."""
    response = HttpResponseRedirect(static("console/favicon.svg"))
    response["Cache-Control"] = "public, max-age=86400"
    return response
