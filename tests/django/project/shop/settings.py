"""A minimal Django project using jobcore: its database comes from SHOP_DATABASE_URL."""

import os
from urllib.parse import unquote, urlsplit

_url = urlsplit(os.environ["SHOP_DATABASE_URL"])

SECRET_KEY = "test-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "shop.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "jobcore.contrib.django", "shop.orders"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
    }
}
# jobcore on the same server and database, in the schema the test names (JOBCORE is optional).
JOBCORE = {"OPTIONS": {"schema": os.environ.get("SHOP_JOBCORE_SCHEMA", "jobcore")}}
LOGGING = {"version": 1, "disable_existing_loggers": False}
