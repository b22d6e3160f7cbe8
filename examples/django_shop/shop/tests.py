"""The shop's tests, run by Django's test runner (`python manage.py test shop`) on a real
PostgreSQL database. TransactionTestCase, not TestCase: what is proved is what a commit and a
rollback of the view's own transaction leave behind, and a worker in another process sees only
committed rows."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo
from django.core.management import call_command
from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.test import Client, SimpleTestCase, TransactionTestCase, override_settings
from django.urls import path

import tenure
from shop.models import Order
from shop.tasks import send_receipt
from shop.views import PaymentDeclined
from tenure.contrib.django import django_connection, enqueue, tenure_app, tenure_dsn
from tenure.contrib.django.settings import tenure_settings
from tenure.model.errors import ConfigurationError

HERE = Path(__file__).resolve().parent.parent


def committed_jobs() -> list[dict[str, Any]]:
    """The jobs as another connection sees them: committed ones only."""
    with psycopg.connect(tenure_dsn(), row_factory=psycopg.rows.dict_row) as other:
        return other.execute("SELECT id, task, payload, state FROM tenure.jobs ORDER BY id").fetchall()


class ShopTestCase(TransactionTestCase):
    def setUp(self) -> None:
        # Django's flush between tests empties its own models' tables only, not Tenure's.
        with psycopg.connect(tenure_dsn(), autocommit=True) as other:
            other.execute("TRUNCATE tenure.jobs CASCADE")


class PlaceOrderTests(ShopTestCase):
    def test_committed_view_leaves_order_and_job(self) -> None:
        """A view whose atomic() block commits leaves both the order and its receipt's job."""
        response = Client().post("/orders/", {"email": "a@example.com"})
        self.assertEqual(response.status_code, 201)
        body = response.json()
        self.assertTrue(Order.objects.filter(pk=body["order"]).exists())
        jobs = {job["id"]: job for job in committed_jobs()}
        self.assertEqual(jobs[body["job"]]["payload"], {"order_id": body["order"]})
        self.assertEqual(jobs[body["job"]]["state"], "pending")

    def test_rolled_back_view_leaves_neither(self) -> None:
        """A view that enqueues and then raises in atomic() leaves no order and no job."""
        before = committed_jobs()
        client = Client(raise_request_exception=False)
        response = client.post("/orders/declined/", {"email": "b@example.com"})
        self.assertEqual(response.status_code, 500)
        self.assertFalse(Order.objects.exists())
        self.assertEqual(committed_jobs(), before)

    def test_later_view_schedules_its_job(self) -> None:
        """with_options(delay=3600) enqueues the receipt's job to run in an hour, with the order."""
        response = Client().post("/orders/later/", {"email": "h@example.com"})
        self.assertEqual(response.status_code, 201)
        [job] = committed_jobs()
        self.assertEqual((job["id"], job["state"]), (response.json()["job"], "scheduled"))

    def test_json_body_is_a_400_naming_the_form_field(self) -> None:
        """A post without the form field (JSON, say) is a 400 logged with what to send; nothing is written."""
        with self.assertLogs("django.request", "WARNING") as logged:
            response = Client().post("/orders/", {"email": "i@example.com"}, content_type="application/json")
        self.assertEqual(response.status_code, 400)
        self.assertIn("post the form field email", logged.output[0])
        self.assertFalse(Order.objects.exists())
        self.assertEqual(committed_jobs(), [])


class JoinedTransactionTests(ShopTestCase):
    def test_enqueue_shares_django_connection_state(self) -> None:
        """Inside atomic() the job goes through Django's own psycopg connection, in its open transaction."""
        with transaction.atomic():
            Order.objects.create(email="c@example.com")
            conn = django_connection()
            self.assertIs(conn, connection.connection)
            self.assertFalse(conn.autocommit)
            enqueue(send_receipt, order_id=1)
            self.assertEqual(conn.info.transaction_status, psycopg.pq.TransactionStatus.INTRANS)
            self.assertEqual(committed_jobs(), [])  # not visible before the block commits
        self.assertEqual(len(committed_jobs()), 1)
        self.assertTrue(connection.connection.autocommit)

    def test_enqueue_first_in_atomic_rolls_back(self) -> None:
        """An enqueue that is the first statement of an atomic() block still rolls back with it."""
        with self.assertRaises(RuntimeError), transaction.atomic():
            enqueue(send_receipt, order_id=2)
            raise RuntimeError("rolled back")
        self.assertEqual(committed_jobs(), [])

    def test_enqueue_outside_atomic_commits_at_once(self) -> None:
        """Outside any atomic() block, in Django's autocommit mode, the job is committed at once."""
        job = enqueue(send_receipt, order_id=3)
        self.assertTrue(connection.connection.autocommit)
        self.assertEqual([j["id"] for j in committed_jobs()], [job.id])
        # The app's own client follows Django to the test database too.
        with tenure_app().sync_client as client:
            stored = client.get_job(job.id)
        self.assertIsNotNone(stored)

    def test_broken_transaction_is_refused(self) -> None:
        """In an atomic() block Django has marked for rollback, enqueue refuses as the ORM does."""
        from django.db.transaction import TransactionManagementError

        with transaction.atomic():
            Order.objects.create(email="e@example.com")
            transaction.set_rollback(True)
            with self.assertRaises(TransactionManagementError):
                enqueue(send_receipt, order_id=4)
        self.assertEqual(committed_jobs(), [])


def order_in_request(request: HttpRequest) -> JsonResponse:
    """A view with no atomic() of its own, for the ATOMIC_REQUESTS tests (their ROOT_URLCONF)."""
    order = Order.objects.create(email=request.POST["email"])
    job = enqueue(send_receipt, order_id=order.pk)
    if request.POST.get("decline"):
        raise PaymentDeclined(f"card declined for order {order.pk}")
    return JsonResponse({"order": order.pk, "job": job.id}, status=201)


urlpatterns = [path("in-request/", order_in_request)]


@override_settings(ROOT_URLCONF="shop.tests")
class AtomicRequestsTests(ShopTestCase):
    """With ATOMIC_REQUESTS = True the request's transaction is an atomic() block: the job
    commits with the response's writes, or rolls back with them."""

    def setUp(self) -> None:
        super().setUp()
        settings = connection.settings_dict
        self.addCleanup(settings.__setitem__, "ATOMIC_REQUESTS", settings["ATOMIC_REQUESTS"])
        settings["ATOMIC_REQUESTS"] = True

    def test_request_that_raises_leaves_neither_order_nor_job(self) -> None:
        """Under ATOMIC_REQUESTS, a view that enqueues and then raises leaves no order and no job."""
        client = Client(raise_request_exception=False)
        response = client.post("/in-request/", {"email": "j@example.com", "decline": "1"})
        self.assertEqual(response.status_code, 500)
        self.assertFalse(Order.objects.exists())
        self.assertEqual(committed_jobs(), [])

    def test_request_that_returns_commits_order_and_job(self) -> None:
        """Under ATOMIC_REQUESTS, a view that returns commits its order and its job together."""
        response = Client().post("/in-request/", {"email": "k@example.com"})
        self.assertEqual(response.status_code, 201)
        self.assertTrue(Order.objects.filter(pk=response.json()["order"]).exists())
        self.assertEqual([j["id"] for j in committed_jobs()], [response.json()["job"]])

    def test_without_atomic_requests_each_write_commits_at_once(self) -> None:
        """Without ATOMIC_REQUESTS the same raising view leaves its order and job, each committed at once."""
        connection.settings_dict["ATOMIC_REQUESTS"] = False
        client = Client(raise_request_exception=False)
        response = client.post("/in-request/", {"email": "l@example.com", "decline": "1"})
        self.assertEqual(response.status_code, 500)
        self.assertTrue(Order.objects.filter(email="l@example.com").exists())
        self.assertEqual(len(committed_jobs()), 1)


class BlockingEnqueueTests(ShopTestCase):
    """`task.enqueue_sync(...)` and `app.enqueue_sync(...)`, given no connection, join the
    atomic() block open on Django's connection, as `enqueue` does."""

    def tearDown(self) -> None:
        tenure_app().close_sync()  # its pool's connections would keep the test database from being dropped

    def test_enqueue_sync_in_atomic_rolls_back_with_the_block(self) -> None:
        """enqueue_sync inside atomic(), then an exception: neither the order nor its job remains."""
        with self.assertRaises(RuntimeError), transaction.atomic():
            order = Order.objects.create(email="f@example.com")
            send_receipt.enqueue_sync(order_id=order.pk)
            raise RuntimeError("card declined")
        self.assertFalse(Order.objects.exists())
        self.assertEqual(committed_jobs(), [])

    def test_enqueue_sync_in_atomic_commits_with_the_block(self) -> None:
        """enqueue_sync inside atomic() is invisible until the block commits, then committed with it."""
        with transaction.atomic():
            order = Order.objects.create(email="g@example.com")
            job = send_receipt.enqueue_sync(order_id=order.pk)
            self.assertEqual(committed_jobs(), [])
        self.assertEqual([j["id"] for j in committed_jobs()], [job.id])
        self.assertTrue(connection.connection.autocommit)

    def test_app_enqueue_sync_joins_too(self) -> None:
        """The README's form, app.enqueue_sync(task, payload), and the sync client join atomic() as well."""
        app = tenure_app()
        with self.assertRaises(RuntimeError), transaction.atomic():
            app.enqueue_sync(send_receipt, {"order_id": 1})
            app.sync_client.enqueue(send_receipt, {"order_id": 2})
            raise RuntimeError("rolled back")
        self.assertEqual(committed_jobs(), [])

    def test_enqueue_sync_outside_atomic_commits_at_once(self) -> None:
        """Outside any atomic() block the job is committed at once, by Tenure's own client."""
        job = send_receipt.enqueue_sync(order_id=5)
        self.assertEqual([j["id"] for j in committed_jobs()], [job.id])

    def test_client_on_another_database_is_refused_inside_atomic(self) -> None:
        """A client on another database refuses inside atomic(), naming the fix, and writes nothing."""
        params = psycopg.conninfo.conninfo_to_dict(tenure_dsn())
        elsewhere = psycopg.conninfo.make_conninfo(**{**params, "dbname": "postgres"})
        with tenure.SyncClient(elsewhere) as client, transaction.atomic():
            with self.assertRaisesRegex(
                ConfigurationError, r"cannot join its transaction.*/postgres.*TENURE\['DSN'\].*on_commit"
            ):
                client.enqueue(send_receipt, {"order_id": 6})
            self.assertIsNone(client._pool, "the refused client connected")
        self.assertEqual(committed_jobs(), [])


class CommandTests(ShopTestCase):
    def test_tenure_migrate_is_idempotent(self) -> None:
        """manage.py tenure_migrate on a migrated database applies nothing and names the version."""
        from io import StringIO

        out = StringIO()
        call_command("tenure_migrate", stdout=out)
        self.assertIn("none pending", out.getvalue())

    def test_worker_command_runs_the_job(self) -> None:
        """manage.py tenure_worker, a real process, runs the view's job and stops on SIGTERM with exit 0."""
        response = Client().post("/orders/", {"email": "d@example.com"})
        order, job = response.json()["order"], response.json()["job"]
        # The worker process reads the same settings: point it at this test database.
        env = {**os.environ, "SHOP_DSN": tenure_dsn()}
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "tenure_worker", "--concurrency", "2", "--grace", "5"],
            cwd=HERE,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not Order.objects.get(pk=order).receipt_sent:
                time.sleep(0.1)
            self.assertTrue(Order.objects.get(pk=order).receipt_sent)
            worker.send_signal(signal.SIGTERM)
            output, _ = worker.communicate(timeout=30)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
        self.assertEqual(worker.returncode, 0, output)
        self.assertIn("succeeded 1", output)
        states = {j["id"]: j["state"] for j in committed_jobs()}
        self.assertEqual(states[job], "succeeded")


class SettingsTests(SimpleTestCase):
    def test_unknown_key_is_named(self) -> None:
        """A TENURE setting with an unknown key fails naming that key and the known ones."""
        with (
            override_settings(TENURE={"APP": "shop.tasks:app", "DNS": "postgresql://x"}),
            self.assertRaisesRegex(ConfigurationError, r"unknown key\(s\) 'DNS'.*APP, DSN"),
        ):
            tenure_settings()

    def test_missing_app_is_explained(self) -> None:
        """A TENURE setting without APP fails showing the setting to write."""
        with override_settings(TENURE={}), self.assertRaisesRegex(ConfigurationError, r'\{"APP": '):
            tenure_settings()

    def test_unknown_database_is_named(self) -> None:
        """A TENURE DATABASE that DATABASES lacks fails naming the aliases there are."""
        with (
            override_settings(TENURE={"APP": "shop.tasks:app", "DATABASE": "jobs"}),
            self.assertRaisesRegex(ConfigurationError, r"'jobs'.*'default'"),
        ):
            tenure_settings()
