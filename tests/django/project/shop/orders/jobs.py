"""The jobs of the orders app (manage.py jobcore_worker imports every app's jobs.py)."""

from jobcore import job
from shop.orders.models import Order


@job(queue="orders", max_attempts=3)
def fulfil(payload: dict) -> str:
    """Mark the order fulfilled: a handler using the ORM inside the worker."""
    updated = Order.objects.filter(pk=payload["order"]).update(fulfilled=True)
    return f"fulfilled {updated}"
