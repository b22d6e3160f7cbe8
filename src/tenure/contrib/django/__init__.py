"""Django integration: settings, enqueue in Django's transaction, `manage.py tenure_worker`.

    INSTALLED_APPS = [..., "tenure.contrib.django"]
    TENURE = {"APP": "shop.tasks:app"}

    from tenure.contrib.django import enqueue
    with transaction.atomic():
        order = Order.objects.create(...)
        enqueue(send_receipt, order_id=order.pk)   # commits or rolls back with the order

See docs/django.md.
"""

from tenure.contrib.django.configured import tenure_app, tenure_dsn
from tenure.contrib.django.joined import JoinedCall, django_connection, enqueue, with_options

__all__ = ["JoinedCall", "django_connection", "enqueue", "tenure_app", "tenure_dsn", "with_options"]
