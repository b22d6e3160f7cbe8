"""The shop's Tenure app and its one task. `manage.py tenure_worker` runs it with Django set up,
so the handler may use the ORM; it is a plain function, so it runs in a thread, where the ORM
may be called."""

import tenure
from shop.models import Order

app = tenure.Tenure()  # DSN and schema come from settings.TENURE


@app.task(queue="emails", max_attempts=5)
def send_receipt(ctx: tenure.JobContext, order_id: int) -> str:
    Order.objects.filter(pk=order_id).update(receipt_sent=True)  # safe to repeat after a crash
    return f"receipt for order {order_id}"
