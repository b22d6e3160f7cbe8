"""The Django app: add "tenure.contrib.django" to INSTALLED_APPS."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TenureConfig(AppConfig):
    name = "tenure.contrib.django"
    label = "tenure"
    verbose_name = "Tenure"

    def ready(self) -> None:
        from tenure.contrib.django.configured import tenure_app
        from tenure.contrib.django.connections import fresh_connections
        from tenure.contrib.django.hints import django_migrate_hint
        from tenure.contrib.django.joined import open_transaction
        from tenure.contrib.django.migrations_hook import after_django_migrate
        from tenure.contrib.django.settings import tenure_settings
        from tenure.db.migrate_hint import set_migrate_hint
        from tenure.producer.client_support import join_open_transactions
        from tenure.worker.executor import around_thread_handlers

        tenure_app()  # imports the app, so its tasks are registered, and fails early on bad settings
        # Every worker of this process, whichever app it runs: any thread handler may use the ORM.
        around_thread_handlers(fresh_connections)
        # A plain `task.enqueue_sync(...)` in a view's atomic() joins it, as `enqueue` does.
        join_open_transactions(open_transaction)
        # Errors name `manage.py tenure_migrate`: `tenure migrate` would migrate another database.
        set_migrate_hint(django_migrate_hint)
        if tenure_settings().migrate:
            post_migrate.connect(after_django_migrate, sender=self, dispatch_uid="tenure-migrate")
