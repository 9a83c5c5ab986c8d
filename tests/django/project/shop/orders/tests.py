"""Run by `manage.py test` (tests/django/test_django.py): jobcore follows Django's test database."""

from django.db import connection
from django.test import TransactionTestCase

from jobcore import get_job_driver
from shop.orders.jobs import fulfil
from shop.orders.models import Order
from shop.orders.views import place_order


class PlaceOrderTests(TransactionTestCase):
    def test_the_job_lands_in_the_test_database(self) -> None:
        order, queued = place_order("in-test")
        driver = get_job_driver()
        assert connection.settings_dict["NAME"].startswith("test_")
        assert driver.database_name == connection.settings_dict["NAME"]
        assert driver.introspect.get(queued.id) == queued
        assert Order.objects.get(pk=order.pk).name == "in-test"
        marker = fulfil.enqueue({"order": order.pk}, queue="only-in-test")
        assert driver.introspect.get(marker.id) == marker
        print("JOBCORE-TEST-DATABASE", driver.database_name)
