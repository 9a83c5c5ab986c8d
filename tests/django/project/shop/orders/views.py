"""Placing an order: the row and its job commit together, or neither does."""

import json

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from jobcore.contrib.django import enqueue
from shop.orders.jobs import fulfil
from shop.orders.models import Order


class Refused(Exception):
    """The order's own work failed after its job was enqueued."""


def place_order(name: str, *, helper: bool = False, fail: bool = False, seen: list | None = None):
    """Create an Order and enqueue its fulfilment in one transaction; ``fail`` raises after both."""
    with transaction.atomic():
        order = Order.objects.create(name=name)
        # The explicit helper enqueues on Django's connection; the handle joins the atomic
        # block by itself because the app is installed.
        queued = enqueue(fulfil, {"order": order.pk}) if helper else fulfil.enqueue({"order": order.pk})
        if seen is not None:
            seen.append(queued)
        if fail:
            raise Refused(name)
    return order, queued


@csrf_exempt
def create_order(request: HttpRequest) -> HttpResponse:
    body = json.loads(request.body)
    try:
        order, queued = place_order(body["name"], fail=body.get("fail", False))
    except Refused:
        return JsonResponse({"error": "refused"}, status=409)
    return JsonResponse({"order": order.pk, "job": queued.id}, status=201)
