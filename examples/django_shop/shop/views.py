"""An order and its receipt's job are written in one transaction: both or neither."""

from django.core.exceptions import BadRequest
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from shop.models import Order
from shop.tasks import send_receipt
from tenure.contrib.django import enqueue, with_options


class PaymentDeclined(Exception):
    pass


def posted_email(request: HttpRequest) -> str:
    email = request.POST.get("email")
    if not email:  # Django answers BadRequest with a 400; a missing key would be a 500
        raise BadRequest("post the form field email, as in: curl -d email=a@example.com ...")
    return email


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create(email=posted_email(request))
        job = enqueue(send_receipt, order_id=order.pk)  # commits or rolls back with the order
    return JsonResponse({"order": order.pk, "job": job.id}, status=201)


@require_POST
def place_order_later(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create(email=posted_email(request))
        job = with_options(send_receipt, delay=3600).enqueue(order_id=order.pk)  # runs in an hour
    return JsonResponse({"order": order.pk, "job": job.id}, status=201)


@require_POST
def place_declined_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create(email=posted_email(request))
        enqueue(send_receipt, order_id=order.pk)
        raise PaymentDeclined(f"card declined for order {order.pk}")  # the order and its job roll back
