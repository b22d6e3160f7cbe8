"""The shop's Tenure app and its one task. `manage.py tenure_worker` runs it with Django set up,
so the handler may use the ORM; it is a plain function, so it runs in a thread, where the ORM
may be called."""

import tenure
from shop.models import Order

app = tenure.Tenure()  # DSN and schema come from settings.TENURE (here: Django's own database)


@app.task(queue="emails", max_attempts=5)
def send_receipt(ctx: tenure.JobContext, order_id: int) -> str:
    # The same job may run twice after a crash: marking the order is safe to repeat.
    Order.objects.filter(pk=order_id).update(receipt_sent=True)
    return f"receipt for order {order_id}"
