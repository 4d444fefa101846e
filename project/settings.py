"""Settings of the runnable project: the only place that reads the environment.

Every ``IRIS_CONSOLIDATION_*`` variable maps to the Django setting of the same name;
the app's defaults live in ``iris_consolidation/conf.py``. With no ``DATABASE_URL``
the project uses an embedded PostgreSQL 18 + pgvector (see ``project/embedded_db.py``).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import environ

# litellm downloads a price list at import unless told otherwise; there is no network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    env.read_env(BASE_DIR / ".env")

SECRET_KEY = env("DJANGO_SECRET_KEY", default="dev-only-insecure-key-change-me")
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Before staticfiles: runserver leaves static files to WhiteNoise, as in production.
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.postgres",  # pgvector's HnswIndex needs it (check postgres.E005)
    "django_q",
    "iris_consolidation",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's CSS and JS) with DJANGO_DEBUG false as well.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "project.wsgi.application"

# --- Database: PostgreSQL with pgvector, everywhere -------------------------------
EMBEDDED_PGDATA = Path(env("IRIS_EMBEDDED_PGDATA", default=str(BASE_DIR / ".pgdata")))
if env("DATABASE_URL", default=""):
    DATABASES = {"default": env.db("DATABASE_URL")}
else:
    DATABASES = {
        "default": {
            # A thin wrapper over django.db.backends.postgresql that starts the
            # embedded server on the first connection (not at import).
            "ENGINE": "project.embedded_db",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": str(EMBEDDED_PGDATA),
            "PGDATA": str(EMBEDDED_PGDATA),
        }
    }
DATABASES["default"].setdefault("TEST", {})
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = env("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# WhiteNoise serves from STATIC_ROOT after `collectstatic`; until then (a fresh clone,
# `runserver`) it finds the files in the apps, so the console is styled out of the box.
WHITENOISE_USE_FINDERS = env.bool("WHITENOISE_USE_FINDERS", default=True)
# ...and it warns at every start that STATIC_ROOT does not exist yet: expected then.
warnings.filterwarnings("ignore", message="No directory at: ", category=UserWarning)

# --- django-q2 --------------------------------------------------------------------
# ORM broker by default (no extra server); REDIS_URL switches to Redis.
Q_WORKERS = env.int("Q_WORKERS", default=2)
Q_CLUSTER = {
    # Q_NAME keeps deployments (or test sessions) sharing one Redis apart.
    "name": env("Q_NAME", default="iris"),
    "workers": Q_WORKERS,
    "timeout": 150,  # above the 120 s cluster task timeout
    "retry": 180,  # must stay above timeout, or the ORM broker re-delivers a running task
    "max_attempts": 3,
    # Few tasks fetched ahead: a fetched task waits in the worker's memory, where a
    # crash loses it (Redis) or the ORM broker's retry clock runs on it.
    "queue_limit": Q_WORKERS,
    # A missed schedule fires once when the cluster comes back, not once per missed slot.
    "catch_up": False,
    "ack_failures": True,
    "save_limit": 1000,
    "label": "Django Q2",
}
REDIS_URL = env("REDIS_URL", default="")
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"
    # The workers' heartbeat (django-q2's cluster statistics, saved every half second with
    # a 3 s expiry) lives in a Django cache with the ORM broker: a shared one, so the
    # console sees idle workers. Its table is made by `manage.py createcachetable`.
    Q_CLUSTER["cache"] = "django_q"

CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "django_q": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "iris_django_q_cache"},
}

# --- iris_consolidation (defaults and meaning in iris_consolidation/conf.py) ------
_IRIS = {
    "SIMILARITY_THRESHOLD": env.float,
    "MAX_CLUSTER_SIZE": env.int,
    "NEAREST_PAIRS": env.bool,
    "MIN_CLUSTER_SIZE": env.int,
    "USER_JOB_TIMEOUT": env.int,
    "CLUSTER_JOB_TIMEOUT": env.int,
    "JOBS_PER_MINUTE": env.int,
    "MAX_GENERATION": env.int,
    "RETRY_WINDOW": env.int,
    "RATE_LIMIT_PERIOD": env.float,
    "JOB_ATTEMPTS": env.int,
    "SCHEDULE_CRON": env.str,
    "SCHEDULE_LOCK_TTL": env.int,
    "MAX_RETIREMENTS_PER_RUN": env.int,
    "CLUSTERS_PER_CALL": env.int,
    "MAX_COST_PER_RUN": env.float,
    "JUDGE": env.str,
    "MODEL": env.str,
    "LLM_API_BASE": env.str,
    "LLM_TIMEOUT": env.float,
    "LLM_ATTEMPTS": env.int,
    "RISK_POLICY": env.str,
    "VERIFY_MODEL": env.str,
    "EMBEDDING_MODEL": env.str,
    "EMBEDDING_BATCH_SIZE": env.int,
    "DAYS_FALLBACK": env.float,
    "ENABLED": env.bool,
    "SCHEDULE_INTERVAL_HOURS": env.int,
    "SCHEDULED_DRY_RUN_ONLY": env.bool,
    "USER_ALLOWLIST": env.list,
    "MAX_CONTENT_LENGTH": env.int,
    "HNSW_EF_SEARCH": env.int,
    "HALF_LIFE_DAYS": env.float,
    "DECAY_WEIGHTS": env.str,
    "JACCARD_THRESHOLD": env.float,
    "PRUNE_FLOOR": env.float,
    "MAX_PRUNE_SHARE": env.float,
    "NOISE": env.str,
    "DECAY": env.str,
    "LEXICAL": env.str,
    "SEMANTIC": env.str,
    "PRUNE": env.str,
    "MINE": env.str,
    "RELOCATE": env.str,
    "PROMOTE": env.str,
    "MINING_CONFIDENCE": env.str,
    "MAX_NEW_TRUTHS": env.int,
    "MINING_DUPLICATE_SIMILARITY": env.float,
    "MINING_KNOWN_TRUTHS": env.int,
    "MINING_CONCURRENCY": env.int,
    "RELOCATE_MIN_CHARS": env.int,
    "PROMOTE_THRESHOLD": env.int,
    "PHASE1_MEMORY_MB": env.float,
    "PHASE1_APPROXIMATE_FROM": env.int,
    "PHASE1_NEIGHBOURS": env.int,
    "PHASE1_USERS_PER_TASK": env.int,
    "PHASE1_BATCH_MAX_TRUTHS": env.int,
    "NEIGHBOURHOODS": env.bool,
    "NEIGHBOURHOOD_K": env.int,
    "NEIGHBOURHOOD_LEXICAL_K": env.int,
    "NEIGHBOURHOOD_JACCARD_FLOOR": env.float,
    "NEIGHBOURHOOD_GROUP_SIZE": env.int,
    "NEIGHBOURHOOD_ROUNDS": env.int,
    "SAME_ATTRIBUTE": env.bool,
}
#: Settings whose empty value means something (no schedule), so an empty variable sets it.
_EMPTY_IS_A_VALUE = {"SCHEDULE_CRON"}
for _name, _cast in _IRIS.items():
    _var = f"IRIS_CONSOLIDATION_{_name}"
    if os.environ.get(_var, "").strip():
        globals()[_var] = _cast(_var)
    elif _var in os.environ and _name in _EMPTY_IS_A_VALUE:
        globals()[_var] = ""  # IRIS_CONSOLIDATION_SCHEDULE_CRON="": no scheduled run
    # else: unset or empty, the app's default

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "iris_consolidation": {"handlers": ["console"], "level": env("IRIS_LOG_LEVEL", default="WARNING")},
        "LiteLLM": {"level": "WARNING"},
    },
}
