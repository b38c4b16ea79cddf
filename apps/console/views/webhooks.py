"""Webhooks: the endpoints (list, create with the ``whsec_`` secret shown once, edit, delete), the
delivery history with the API's filters and cursor pages, one delivery with the other attempts of
its event, retry (409 when the event was already delivered, an attempt is under way or the webhook
is disabled), test (sends ``webhook.test``) and the secret roll (the new secret shown once, the old
one signing beside it for the overlap).

A pending delivery updates in place: its table row and its page's summary ask htmx to fetch them
again (``delivery_row``, ``delivery_summary``) until the attempt settles, and the settled answer has
no trigger, so the polling stops there.

Input is written through the API's services, which check it (apps/webhooks/inputs.py). A secret exists
in clear only in the answer that makes it: that answer is never cached and no other page, message
or log holds it."""

from django.contrib import messages
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request

from apps.console.access import Console, console_view
from apps.console.forms import flat_errors, relative_link, service_errors
from apps.core.errors import GatewayError
from apps.events.models import EventType
from apps.organizations.models import Role
from apps.webhooks import selectors, services
from apps.webhooks.api.serializers import DeliveryQuerySerializer
from apps.webhooks.api.views import DeliveryPagination
from apps.webhooks.inputs import EVENT_KINDS
from apps.webhooks.models import ALL_EVENTS, DeliveryStatus, Webhook, WebhookDelivery

# Deliveries a webhook's page shows; the history has the rest.
RECENT_DELIVERIES = 10


def _webhook(console: Console, webhook_id) -> Webhook:
    return get_object_or_404(selectors.webhooks_of(console.organization.id), pk=webhook_id)


def _delivery(console: Console, delivery_id) -> WebhookDelivery:
    return get_object_or_404(
        selectors.deliveries_of(console.organization.id).select_related("webhook"), pk=delivery_id
    )


# htmx stops polling on this status (and swaps in its empty body): a delivery deleted with its webhook,
# or never the organization's, leaves a page that asks no more. A 404 is not swapped: it would ask on.
STOP_POLLING = 286


def _polled_delivery(console: Console, delivery_id) -> WebhookDelivery | None:
    return (
        selectors.deliveries_of(console.organization.id)
        .select_related("webhook")
        .filter(pk=delivery_id)
        .first()
    )


def _webhook_input(post: QueryDict) -> dict:
    return {
        "url": post.get("url", "").strip(),
        "events": post.getlist("events"),
        "description": post.get("description", "").strip(),
        "is_active": post.get("is_active") == "on",
    }


def _form_context(console: Console, **extra) -> dict:
    return {
        "console": console,
        "event_kinds": [
            (kind, "every kind, including those added later" if kind == ALL_EVENTS else "")
            for kind in EVENT_KINDS
        ],
        **extra,
    }


# --- Endpoints ------------------------------------------------------------------------------------


@console_view()
def webhook_list(request, console: Console):
    return render(
        request,
        "console/webhooks/list.html",
        {"console": console, "webhooks": selectors.webhooks_of(console.organization.id)},
    )


@never_cache  # the answer to a create carries the only copy of the secret
@console_view(role=Role.ADMIN, methods=("GET", "POST"))
def webhook_create(request, console: Console):
    errors: dict = {}
    if request.method == "POST":
        try:
            webhook, secret = services.webhook_create(
                organization=console.organization, data=_webhook_input(request.POST)
            )
        except GatewayError as error:
            errors = service_errors(error)
        else:
            return render(
                request,
                "console/webhooks/secret.html",
                {"console": console, "webhook": webhook, "secret": secret, "rolled": False},
                status=201,
            )
    return render(
        request,
        "console/webhooks/form.html",
        _form_context(console, errors=errors, form=request.POST if request.method == "POST" else None),
        status=400 if errors else 200,
    )


def _detail(request, console: Console, webhook: Webhook, *, errors=None, form=None, status=400):
    deliveries = selectors.deliveries_matching(
        selectors.deliveries_of(console.organization.id), webhook_id=webhook.id
    )
    return render(
        request,
        "console/webhooks/detail.html",
        _form_context(
            console,
            webhook=webhook,
            deliveries=deliveries[:RECENT_DELIVERIES],
            now=timezone.now(),
            errors=errors or {},
            form=form,
        ),
        status=status if errors else 200,
    )


@console_view()
def webhook_detail(request, console: Console, webhook_id):
    return _detail(request, console, _webhook(console, webhook_id))


@console_view(role=Role.ADMIN, methods=("POST",))
def webhook_update(request, console: Console, webhook_id):
    """Changes the url, events, description and active state; never the secret (roll it)."""
    webhook = _webhook(console, webhook_id)
    try:
        services.webhook_update(webhook=webhook, data=_webhook_input(request.POST))
    except GatewayError as error:
        errors = service_errors(error)
    else:
        messages.success(request, "Saved the webhook.")
        return redirect("console:webhook", webhook_id=webhook.id)
    return _detail(request, console, _webhook(console, webhook_id), errors=errors, form=request.POST)


@console_view(role=Role.ADMIN, methods=("POST",))
def webhook_delete(request, console: Console, webhook_id):
    webhook = _webhook(console, webhook_id)
    services.webhook_delete(webhook=webhook)
    messages.success(request, f"Deleted the webhook for {webhook.url} and its delivery history.")
    return redirect("console:webhooks")


@console_view(role=Role.ADMIN, methods=("POST",))
def webhook_test(request, console: Console, webhook_id):
    """Sends a ``webhook.test`` event to this webhook alone; its delivery is an ordinary one."""
    webhook = _webhook(console, webhook_id)
    try:
        delivery = services.webhook_test(webhook=webhook)
    except GatewayError as error:
        return _detail(request, console, webhook, errors=service_errors(error), status=error.status)
    messages.success(
        request, "Sent a webhook.test event: its delivery is the first row below and updates when it settles."
    )
    return redirect(f"{reverse('console:webhook', kwargs={'webhook_id': webhook.id})}#delivery-{delivery.id}")


@never_cache  # the answer carries the only copy of the new secret
@console_view(role=Role.ADMIN, methods=("POST",))
def webhook_roll_secret(request, console: Console, webhook_id):
    webhook, secret = services.webhook_roll_secret(webhook=_webhook(console, webhook_id))
    return render(
        request,
        "console/webhooks/secret.html",
        {"console": console, "webhook": webhook, "secret": secret, "rolled": True},
    )


# --- Deliveries -----------------------------------------------------------------------------------


@console_view()
def delivery_list(request, console: Console):
    """The history, newest first, with the API's filters (``webhook``, ``status``, ``event_type``)
    and its cursor pages (``cursor``, ``limit``)."""
    query = DeliveryQuerySerializer(data=request.GET)
    context = {
        "console": console,
        "webhooks": selectors.webhooks_of(console.organization.id),
        "statuses": DeliveryStatus.values,
        "event_types": EventType.values,
        "filters": request.GET,
        "deliveries": [],
        "errors": {},
    }
    if not query.is_valid():
        context["errors"] = flat_errors(query.errors)
        return render(request, "console/webhooks/deliveries.html", context, status=400)
    deliveries = selectors.deliveries_matching(
        selectors.deliveries_of(console.organization.id).select_related("webhook"), **query.validated_data
    )
    paginator = DeliveryPagination()
    try:
        page = paginator.paginate_queryset(deliveries, Request(request))
    except NotFound:  # a cursor that is not one of ours
        context["errors"] = {"cursor": ["This page link is not valid; start again from the first page."]}
        return render(request, "console/webhooks/deliveries.html", context, status=400)
    except ValidationError as error:  # a bad limit
        context["errors"] = flat_errors(error.detail)
        return render(request, "console/webhooks/deliveries.html", context, status=400)
    context.update(
        deliveries=page,
        next_page=relative_link(paginator.get_next_link()),
        previous_page=relative_link(paginator.get_previous_link()),
    )
    return render(request, "console/webhooks/deliveries.html", context)


def _delivery_page(request, console: Console, delivery: WebhookDelivery, *, errors=None, status=200):
    attempts = selectors.deliveries_of(console.organization.id).filter(
        webhook_id=delivery.webhook_id, event_id=delivery.event_id
    )
    return render(
        request,
        "console/webhooks/delivery.html",
        {
            "console": console,
            "delivery": delivery,
            "attempts": attempts.order_by("attempt"),
            "errors": errors or {},
        },
        status=status,
    )


@console_view()
def delivery_detail(request, console: Console, delivery_id):
    return _delivery_page(request, console, _delivery(console, delivery_id))


@console_view()
def delivery_row(request, console: Console, delivery_id):
    """One delivery's table row (``?endpoint=1``: with the endpoint column), for htmx's polling."""
    delivery = _polled_delivery(console, delivery_id)
    if delivery is None:
        return HttpResponse(status=STOP_POLLING)
    return render(
        request,
        "console/webhooks/_delivery_row.html",
        {"delivery": delivery, "show_webhook": request.GET.get("endpoint") == "1"},
    )


@console_view()
def delivery_summary(request, console: Console, delivery_id):
    """The head and facts of a delivery's page, for htmx's polling."""
    delivery = _polled_delivery(console, delivery_id)
    if delivery is None:
        return HttpResponse(status=STOP_POLLING)
    return render(request, "console/webhooks/_delivery_summary.html", {"delivery": delivery})


@console_view(role=Role.ADMIN, methods=("POST",))
def delivery_retry(request, console: Console, delivery_id):
    """A new attempt of the delivery's event, now. The service refuses (409) an event already
    delivered, an attempt under way, a disabled webhook: the refusal is shown, nothing is sent."""
    delivery = _delivery(console, delivery_id)
    try:
        retry = services.delivery_retry(delivery=delivery)
    except GatewayError as error:
        return _delivery_page(request, console, delivery, errors=service_errors(error), status=error.status)
    messages.success(request, f"Retrying: attempt {retry.attempt} is on its way.")
    return redirect("console:webhook-delivery", delivery_id=retry.id)


urlpatterns = [
    path("webhooks/", webhook_list, name="webhooks"),
    path("webhooks/new", webhook_create, name="webhook-create"),
    path("webhooks/deliveries/", delivery_list, name="webhook-deliveries"),
    path("webhooks/deliveries/<uuid:delivery_id>/", delivery_detail, name="webhook-delivery"),
    path("webhooks/deliveries/<uuid:delivery_id>/row", delivery_row, name="webhook-delivery-row"),
    path("webhooks/deliveries/<uuid:delivery_id>/summary", delivery_summary, name="webhook-delivery-summary"),
    path("webhooks/deliveries/<uuid:delivery_id>/retry", delivery_retry, name="webhook-delivery-retry"),
    path("webhooks/<uuid:webhook_id>/", webhook_detail, name="webhook"),
    path("webhooks/<uuid:webhook_id>/edit", webhook_update, name="webhook-update"),
    path("webhooks/<uuid:webhook_id>/delete", webhook_delete, name="webhook-delete"),
    path("webhooks/<uuid:webhook_id>/test", webhook_test, name="webhook-test"),
    path("webhooks/<uuid:webhook_id>/roll-secret", webhook_roll_secret, name="webhook-roll-secret"),
]
