"""jobcore's schema, installed by ``python manage.py migrate`` (see :mod:`jobcore.contrib.django._migrate`)."""

from __future__ import annotations

from django.db import migrations

from jobcore.contrib.django._migrate import install_schema


class Migration(migrations.Migration):
    # jobcore's own migration runs its DDL on its own connection, in its own transaction and
    # under its own lock, so this migration is not wrapped in Django's transaction.
    atomic = False
    initial = True
    dependencies = []
    operations = [
        migrations.RunPython(install_schema, migrations.RunPython.noop, elidable=False),
    ]
