"""An order and its receipt's job are written in one transaction: both or neither."""

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from shop.models import Order
from shop.tasks import send_receipt
from tenure.contrib.django import enqueue


class PaymentDeclined(Exception):
    pass


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    email = json.loads(request.body)["email"]
    with transaction.atomic():
        order = Order.objects.create(email=email)
        job = enqueue(send_receipt, order_id=order.pk)
    return JsonResponse({"order": order.pk, "job": job.id}, status=201)


@require_POST
def place_declined_order(request: HttpRequest) -> JsonResponse:
    email = json.loads(request.body)["email"]
    with transaction.atomic():
        order = Order.objects.create(email=email)
        enqueue(send_receipt, order_id=order.pk)
        raise PaymentDeclined(f"card declined for order {order.pk}")  # the order and its job roll back
