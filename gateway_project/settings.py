"""Settings for every environment, read from the environment (12-factor).

With no environment variables the gateway runs embedded: SQLite, Django's local-memory cache and a
Celery worker on a file broker, so a newcomer needs nothing installed. Production sets
``DATABASE_URL`` (PostgreSQL), ``REDIS_URL``, ``SECRET_KEY``, ``ALLOWED_HOSTS`` and ``GATEWAY_HTTPS``.
"""

from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured

from .client_address import parse_trusted_proxies
from .env import BASE_DIR, DATA_DIR, env, env_choice, env_number, local_secret

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="") or local_secret("secret_key")
if len(SECRET_KEY) < 32:
    raise ImproperlyConfigured("SECRET_KEY must be at least 32 characters long")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    # Not "daphne": its app config imports Twisted, which only the server process needs (it serves
    # through gateway_project/serve.py); Celery workers and management commands stay without it.
    "django.contrib.admin.apps.SimpleAdminConfig",  # autodiscovered by urls.py, on first use
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework_simplejwt",
    "rest_framework_simplejwt.token_blacklist",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from here, not from a CDN
    "django_htmx",  # htmx served from the package's static files, not from a CDN
    # Console sign-in (docs/sso.md): allauth's login flow with its two-factor stage, and OpenID
    # Connect single sign-on through the organizations' connections (apps/sso/oidc.py).
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.mfa",
    "apps.core",
    "apps.accounts",
    "apps.organizations",
    "apps.teams",
    "apps.keys",
    "apps.providers",
    "apps.catalog",
    "apps.limits",
    "apps.policies",
    "apps.cache",
    "apps.webhooks",
    "apps.prompts",
    "apps.experiments",
    "apps.sso",
    "apps.console",
    "apps.organization_settings",
    "apps.proxy",
    "apps.outbox",
    "apps.audit",
    "apps.events",
    "apps.conversations",
    "apps.observability",
]

# Only the management surface pays for this stack: /v1/ is served by the lean proxy app
# (gateway_project/asgi.py) before Django's handler is reached.
MIDDLEWARE = [
    "apps.observability.logs.RequestIdMiddleware",  # first: every later line of the request carries its id
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "gateway_project.urls"
ASGI_APPLICATION = "gateway_project.asgi.application"
WSGI_APPLICATION = None

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

# --- Database -------------------------------------------------------------------------------
DATABASES = {"default": env.db_url("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'gateway.sqlite3'}")}
_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # The server, the Celery worker and the background writers share one file: WAL lets readers
    # and a writer work side by side, IMMEDIATE takes the write lock up front instead of failing
    # with "database is locked" on upgrade.
    _db["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Its folder is made when a process starts (apps/core/local_state.py), not by this import.
elif _db["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend, telling the process's breaker when the database goes away, so that callers
    # fail fast instead of each waiting for the pool (apps/core/database.py).
    _db["ENGINE"] = "apps.core.postgresql"
    # Under ASGI every request may run on another thread: pool connections instead of keeping one
    # per thread (CONN_MAX_AGE must then be 0).
    _db["CONN_MAX_AGE"] = 0
    # A database that stops answering must fail fast: callers (the outbox writer) fall back then.
    _db.setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
    if env.bool("DATABASE_POOL", default=True):
        _pool_size = env_number("DATABASE_POOL_SIZE", default=10, minimum=1, maximum=1000)
        _db["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": _pool_size,
            "timeout": 5,
            # psycopg_pool retries a failed connect with a doubling pause for this long (its default
            # is 300 s: after a 67 s outage the ingest waited 55 s for the next attempt). Bounded, a
            # caller that finds no attempt under way starts a new one at once, so the pool is back
            # within about half this once the database answers.
            "reconnect_timeout": env_number(
                "DATABASE_RECONNECT_SECONDS", default=5.0, minimum=1, maximum=300
            ),
        }
# While the database is known to be unreachable, callers fail at once and one of them tries it
# again this often (apps/core/database.py): the longest a process stays behind a recovered database.
DATABASE_RETRY_SECONDS = env_number("DATABASE_RETRY_SECONDS", default=1.0, minimum=0.1, maximum=60)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache and Redis ------------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
# Every key this deployment writes to Redis starts with this, so several gateways (or test runs)
# can share one server.
REDIS_KEY_PREFIX = env.str("GATEWAY_REDIS_PREFIX", default="gw")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": REDIS_KEY_PREFIX,
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# The console's live tail (apps/console): across processes through Redis; in the embedded default
# (one Daphne process) in memory.
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": f"{REDIS_KEY_PREFIX}:channels"},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- Celery ---------------------------------------------------------------------------------
# Redis when there is one; otherwise kombu's filesystem transport, a real broker that needs no
# server, so `make run` still starts a worker and beat and no task ever runs inside a request.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = DATA_DIR / "broker"  # its folders are made when a process starts (apps/core/local_state.py)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
# One beat sends, however many run (gateway_project/beat.py): every node of `make run` starts one.
CELERY_BEAT_SCHEDULER = "gateway_project.beat:SingleBeatScheduler"
CELERY_BEAT_SCHEDULE = {
    "flush-expired-session-tokens": {
        "task": "apps.accounts.tasks.flush_expired_session_tokens",
        "schedule": timedelta(hours=6),
    },
    "apply-audit-retention": {
        "task": "apps.audit.tasks.apply_audit_retention",
        "schedule": timedelta(hours=1),
    },
    "expire-semantic-cache-entries": {
        "task": "apps.cache.tasks.expire_semantic_entries",
        "schedule": timedelta(minutes=10),
    },
    # Webhook attempts whose time has come: automatic retries, and deliveries whose task never
    # reached the broker (docs/webhooks.md).
    "send-due-webhook-deliveries": {
        "task": "apps.webhooks.tasks.deliveries_due",
        "schedule": timedelta(minutes=5),
    },
    # Feedback sent before its request's audit entry was written: attached if the ingest's own
    # listener missed it, dropped after GATEWAY_FEEDBACK_PENDING_SECONDS (docs/experiments.md).
    "apply-stored-response-retention": {
        "task": "apps.conversations.tasks.apply_stored_response_retention",
        "schedule": timedelta(hours=1),
    },
    "sweep-pending-feedback": {
        "task": "apps.experiments.tasks.sweep_pending_feedback",
        "schedule": timedelta(minutes=1),
    },
}

# --- Auth -----------------------------------------------------------------------------------
AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/admin/login/"
# The organization's console (apps/console): its own sign-in page, where a session lands after it.
CONSOLE_LOGIN_URL = "/console/login/"
LOGIN_REDIRECT_URL = "/console/"
# Every sign-in path counts failures and honours the lock-out (apps/accounts/login_throttle.py).
AUTHENTICATION_BACKENDS = ["apps.accounts.login_throttle.ThrottledModelBackend"]

# The console's sign-in (docs/sso.md) is django-allauth's login flow: email and password, then its
# two-factor stage (TOTP with recovery codes); or OpenID Connect single sign-on, whose apps are the
# organizations' SsoConnections, built at request time (apps/sso/adapter.py). No public sign-up:
# owners and admins add people, single sign-on adds its organization's members just in time.
ACCOUNT_ADAPTER = "apps.accounts.adapter.AccountAdapter"
ACCOUNT_FORMS = {"login": "apps.accounts.forms.ConsoleLoginForm"}
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*"]
ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_EMAIL_VERIFICATION = "none"  # accounts are made by people the organization trusts, or its IdP
ACCOUNT_SESSION_REMEMBER = True
ACCOUNT_LOGOUT_ON_GET = False  # sign-out is a POST (CSRF), never a link a page can make you follow
ACCOUNT_LOGOUT_REDIRECT_URL = CONSOLE_LOGIN_URL
# Failed passwords are counted by apps/accounts/login_throttle.py alone (the adapter asks it instead
# of allauth's counter); allauth's "login_failed" limit still bounds wrong two-factor codes per user.
SOCIALACCOUNT_ADAPTER = "apps.sso.adapter.SsoAccountAdapter"
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False  # apps/sso/adapter.py links accounts, after its checks
SOCIALACCOUNT_STORE_TOKENS = False  # the identity provider's tokens are used once, never kept
SOCIALACCOUNT_LOGIN_ON_GET = False  # starting a sign-in is a POST from the console's page
SOCIALACCOUNT_REQUESTS_TIMEOUT = 10
MFA_ADAPTER = "apps.accounts.adapter.MfaAdapter"
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = "LLM Gateway"
MFA_ALLOW_UNVERIFIED_EMAIL = True  # see ACCOUNT_EMAIL_VERIFICATION
MFA_RECOVERY_CODES_SHOW_ONCE = True  # recovery codes are secrets: shown when made, never again
# An identity provider whose TLS certificate comes from a private CA: a PEM bundle of the CAs to
# trust for its discovery document, JWKS and token endpoint (default: the system's CAs).
GATEWAY_SSO_CA_BUNDLE = env.str("GATEWAY_SSO_CA_BUNDLE", default="") or None
# Proving an SSO domain by DNS (apps/sso/dns.py): the resolvers asked for its TXT record, as
# "address" or "address:port", comma-separated; empty asks the system's (/etc/resolv.conf).


def _dns_resolvers(values: list[str]) -> list[tuple[str, int]]:
    import ipaddress

    resolvers = []
    for value in values:
        address, port = value.strip(), 53
        if address.count(":") == 1 or address.startswith("["):  # IPv4:port or [IPv6]:port
            address, _, port_text = address.rpartition(":")
            address = address.strip("[]")
            port = int(port_text) if port_text.isdigit() else -1
        try:
            address = str(ipaddress.ip_address(address))
        except ValueError:
            raise ImproperlyConfigured(f"GATEWAY_SSO_DNS_RESOLVERS: {value!r} is not an IP address") from None
        if not 0 < port < 65536:
            raise ImproperlyConfigured(f"GATEWAY_SSO_DNS_RESOLVERS: {value!r} has no valid port")
        resolvers.append((address, port))
    return resolvers


GATEWAY_SSO_DNS_RESOLVERS = _dns_resolvers(env.list("GATEWAY_SSO_DNS_RESOLVERS", default=[]))
GATEWAY_SSO_DNS_TIMEOUT_SECONDS = env_number(
    "GATEWAY_SSO_DNS_TIMEOUT_SECONDS", default=5.0, minimum=0.1, maximum=60
)
# How long an invitation to an organization can be accepted (apps/organizations).
GATEWAY_INVITATION_TTL_DAYS = env_number("GATEWAY_INVITATION_TTL_DAYS", default=7, minimum=1, maximum=365)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["apps.organizations.authentication.SessionTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["apps.core.api.parsers.JSONParser"],  # nesting bounded
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "apps.core.api.pagination.CursorPagination",
    "DEFAULT_SCHEMA_CLASS": "apps.core.api.schema.ManagementAutoSchema",
    "EXCEPTION_HANDLER": "apps.core.api.exceptions.management_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DATETIME_FORMAT": "%Y-%m-%dT%H:%M:%SZ",
}

SIMPLE_JWT = {
    "ACCESS_TOKEN_LIFETIME": timedelta(
        minutes=env_number("SESSION_ACCESS_MINUTES", default=15, minimum=1, maximum=1440)
    ),
    "REFRESH_TOKEN_LIFETIME": timedelta(
        days=env_number("SESSION_REFRESH_DAYS", default=7, minimum=1, maximum=365)
    ),
    "ROTATE_REFRESH_TOKENS": True,
    "BLACKLIST_AFTER_ROTATION": True,
    "UPDATE_LAST_LOGIN": False,
    "SIGNING_KEY": SECRET_KEY,
    "AUTH_HEADER_TYPES": ("Bearer",),
    "USER_ID_FIELD": "id",
    "USER_ID_CLAIM": "user_id",
}
# However often it is refreshed, a management session ends this long after its sign-in (and at once
# when the account's password changes; apps/accounts/tokens.py).
GATEWAY_SESSION_MAX_AGE_DAYS = env_number("GATEWAY_SESSION_MAX_AGE_DAYS", default=30, minimum=1, maximum=365)

SPECTACULAR_SETTINGS = {
    "TITLE": "LLM Gateway management API",
    "DESCRIPTION": "Organizations, API keys, provider keys, teams, analytics and webhooks. "
    "The OpenAI-compatible proxy lives under /v1/ and is documented in the README.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    # Several objects have a ``status`` of their own choices: each enum named after its object.
    "ENUM_NAME_OVERRIDES": {
        "ApiKeyStatusEnum": "apps.keys.models.KeyStatus",
        "WebhookDeliveryStatusEnum": "apps.webhooks.models.DeliveryStatus",
        # Two fields named "role": a member's role in an organization (invitations) and a message's
        # role in a prompt version.
        "OrganizationRoleEnum": "apps.organizations.models.Role",
        "MessageRoleEnum": "apps.prompts.inputs.ROLES",
    },
    # The interactive docs load their assets from the installed package (drf-spectacular-sidecar,
    # served with the other static files), so they work on a machine without internet access.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No badge fetched from validator.swagger.io either.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "apps.audit.api.export_schema.document_exports",
    ],
}

# --- The gateway itself ---------------------------------------------------------------------
# The word in every x-<brand>-* header and the team header.
GATEWAY_BRAND = env.str("GATEWAY_BRAND", default="gateway").lower()
GATEWAY_API_KEY_PREFIX = env.str("GATEWAY_API_KEY_PREFIX", default="sk_live_")
# How long a worker trusts a looked-up API key before reading it again; revocation does not
# wait for this (see apps/keys/revocation.py).
GATEWAY_KEY_CACHE_SECONDS = env_number("GATEWAY_KEY_CACHE_SECONDS", default=60, minimum=0, maximum=3600)
# While the database is unreachable, a worker keeps serving a key it has read from that last good
# copy for this long past its cache time (revocation through Redis and expiry still apply); a key it
# has no copy of is a 503 (apps/proxy/auth.py). 0: no key is served without the database.
GATEWAY_KEY_OUTAGE_SECONDS = env_number("GATEWAY_KEY_OUTAGE_SECONDS", default=900, minimum=0, maximum=86_400)
# How long a worker keeps an organization's routing configuration at most. Changes reach workers at
# once through the configuration generation (apps/core/generations.py); this bounds a missed one.
GATEWAY_CONFIG_MAX_AGE_SECONDS = env_number(
    "GATEWAY_CONFIG_MAX_AGE_SECONDS", default=60.0, minimum=1, maximum=86_400
)
# While the database cannot be reached, how long after it was read a worker still serves an
# organization's last good configuration (apps/proxy/config.py); a 503 after that.
GATEWAY_CONFIG_OUTAGE_MAX_AGE_SECONDS = env_number(
    "GATEWAY_CONFIG_OUTAGE_MAX_AGE_SECONDS", default=900.0, minimum=0, maximum=7 * 86_400
)
GATEWAY_MAX_BODY_BYTES = env_number(
    "GATEWAY_MAX_BODY_BYTES", default=20 * 1024 * 1024, minimum=1024, maximum=1024 * 1024 * 1024
)
GATEWAY_LOGIN_FAILURE_LIMIT = env_number("GATEWAY_LOGIN_FAILURE_LIMIT", default=5, minimum=1, maximum=1000)
GATEWAY_LOGIN_FAILURE_WINDOW_SECONDS = env_number(
    "GATEWAY_LOGIN_FAILURE_WINDOW_SECONDS", default=900, minimum=1, maximum=7 * 86_400
)
GATEWAY_DEFAULT_LOG_BODIES = env_choice(
    "GATEWAY_DEFAULT_LOG_BODIES", choices=("full", "redacted", "metadata"), default="redacted"
)

# Fernet keys for secrets at rest, newest first (apps/core/crypto.py).
GATEWAY_ENCRYPTION_KEYS = env.list("GATEWAY_ENCRYPTION_KEYS", default=[])
# Self-hosted models on a private network (and the tests) need private upstream addresses;
# link-local and cloud metadata addresses are refused whatever this says.
GATEWAY_ALLOW_PRIVATE_UPSTREAMS = env.bool("GATEWAY_ALLOW_PRIVATE_UPSTREAMS", default=False)
# Webhook endpoints on private or loopback addresses (development, tests); link-local and metadata
# addresses are refused whatever this says.
GATEWAY_ALLOW_PRIVATE_WEBHOOKS = env.bool("GATEWAY_ALLOW_PRIVATE_WEBHOOKS", default=False)
# Single sign-on identity providers (issuer, and every URL of its discovery document) on private or
# loopback addresses (an identity provider on the operator's own network, development, tests);
# link-local and metadata addresses are refused whatever this says (apps/sso/addresses.py).
GATEWAY_ALLOW_PRIVATE_SSO = env.bool("GATEWAY_ALLOW_PRIVATE_SSO", default=False)

# --- Security -------------------------------------------------------------------------------
# Behind TLS (directly or at a balancer that sets X-Forwarded-Proto) set GATEWAY_HTTPS=true.
GATEWAY_HTTPS = env.bool("GATEWAY_HTTPS", default=False)
SECURE_SSL_REDIRECT = GATEWAY_HTTPS
# The single sign-on callback URL allauth builds (the redirect_uri registered at the identity provider).
ACCOUNT_DEFAULT_HTTP_PROTOCOL = "https" if GATEWAY_HTTPS else "http"
SESSION_COOKIE_SECURE = GATEWAY_HTTPS
CSRF_COOKIE_SECURE = GATEWAY_HTTPS
SECURE_HSTS_SECONDS = env_number(
    "SECURE_HSTS_SECONDS", default=31_536_000 if GATEWAY_HTTPS else 0, minimum=0, maximum=2 * 31_536_000
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = GATEWAY_HTTPS
SECURE_HSTS_PRELOAD = GATEWAY_HTTPS
if env.bool("TRUST_X_FORWARDED_PROTO", default=GATEWAY_HTTPS):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The probes answer plain HTTP: a load balancer or kubelet probes the port directly.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
# Reverse proxies whose X-Forwarded-For is believed (comma-separated addresses or CIDR networks;
# default none: the TCP peer is the client). gateway_project/client_address.py takes the right-most
# address that is not one of these.
GATEWAY_TRUSTED_PROXIES = parse_trusted_proxies(env.list("GATEWAY_TRUSTED_PROXIES", default=[]))
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
DATA_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024

# --- I18N, time, static ---------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = env.str("STATIC_ROOT", default=str(DATA_DIR / "staticfiles"))
STATICFILES_DIRS = [BASE_DIR / "static"]
# Made by `manage.py collectstatic` (`make run` runs it); WhiteNoise warns at start-up without it.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# --- Metrics (apps/observability, docs/operations.md "Metrics") -------------------------------
# Every process of this node writes its metrics here and /metrics sums them; `manage.py prepare`
# (make run) empties it before the node's processes start. A node's own folder, never shared.
GATEWAY_METRICS_DIR = env.str("GATEWAY_METRICS_DIR", default=str(DATA_DIR / "metrics"))
# Set: a scrape sends `Authorization: Bearer <token>` (401 without). Unset: /metrics is open.
GATEWAY_METRICS_TOKEN = env.str("GATEWAY_METRICS_TOKEN", default="")
# An organization label on the request, token, cost and cache metrics: one series per organization
# and label set, which a gateway with many organizations pays for in Prometheus's memory.
GATEWAY_METRICS_PER_ORGANIZATION = env.bool("GATEWAY_METRICS_PER_ORGANIZATION", default=False)
# Distinct model names a server process labels metrics with; later ones read "other".
GATEWAY_METRICS_MAX_MODELS = env_number("GATEWAY_METRICS_MAX_MODELS", default=200, minimum=1, maximum=10_000)

# --- Traces (apps/observability/tracing.py): the OTEL_* variables turn them on ------------------
# Bodies on the request's span (as the organization's audit log keeps them, when it keeps them).
GATEWAY_TRACE_CONTENT = env.bool("GATEWAY_TRACE_CONTENT", default=False)

# --- Logging --------------------------------------------------------------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO").upper()
# text (the default), or json: one JSON object per line, in every process (apps/observability/logs.py).
GATEWAY_LOG_FORMAT = env_choice("GATEWAY_LOG_FORMAT", choices=("text", "json"), default="text")
# The access log leaves out health probes, /metrics scrapes and static files unless this is true
# (gateway_project/access_log.py): a balancer's probes would drown the requests people read it for.
GATEWAY_ACCESS_LOG_ALL = env.bool("GATEWAY_ACCESS_LOG_ALL", default=False)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request": {"()": "apps.observability.logs.RequestContextFilter"}},
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "apps.observability.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": GATEWAY_LOG_FORMAT,
            "filters": ["request"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # httpx logs every request at INFO: noise, and a place where URLs could leak.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "django.request": {"level": "ERROR"},
        # "No hostname was supplied": kombu's note on the embedded file broker's URL, which has none.
        "kombu.connection": {"level": "ERROR"},
    },
}

# --- Routing and upstreams (apps/proxy/routing.py, apps/proxy/forwarding.py) ----------------
GATEWAY_MAX_ATTEMPTS = env_number("GATEWAY_MAX_ATTEMPTS", default=3, minimum=1, maximum=10)
# From the request's arrival until an upstream answers (or, for a stream, sends its first chunk):
# every attempt, failover and retries included, ends within it.
GATEWAY_REQUEST_DEADLINE_SECONDS = env_number(
    "GATEWAY_REQUEST_DEADLINE_SECONDS", default=60.0, minimum=0.1, maximum=3600
)
# Per attempt, so that a hanging key gives way to the next candidate within seconds instead of using
# up the whole deadline (docs/proxy.md, "Time limits"): the TCP/TLS connect; the wait for the
# upstream's first byte (a stream's first event; a whole answer's response, which providers send only
# once it is generated), except on a request's last possible attempt, which has the rest of the
# deadline; and, once a stream has started, the longest silence between two of its chunks.
GATEWAY_CONNECT_TIMEOUT_SECONDS = env_number(
    "GATEWAY_CONNECT_TIMEOUT_SECONDS", default=5.0, minimum=0.1, maximum=600
)
GATEWAY_FIRST_BYTE_TIMEOUT_SECONDS = env_number(
    "GATEWAY_FIRST_BYTE_TIMEOUT_SECONDS", default=20.0, minimum=0.1, maximum=3600
)
GATEWAY_STREAM_IDLE_SECONDS = env_number("GATEWAY_STREAM_IDLE_SECONDS", default=60.0, minimum=1, maximum=3600)
# A request with a single candidate retries it after a transient failure (5xx, connection error,
# timeout) after this backoff, doubled on each further retry, with jitter; within the attempts and the
# deadline above.
GATEWAY_RETRY_BACKOFF_SECONDS = env_number(
    "GATEWAY_RETRY_BACKOFF_SECONDS", default=0.5, minimum=0, maximum=30
)
# On SIGTERM a server stops accepting and gives the requests and streams in flight this long to
# finish before it ends them with a 503 or an error event (gateway_project/serve.py). Keep it below
# the orchestrator's own limit (Kubernetes' terminationGracePeriodSeconds, `docker stop -t`).
GATEWAY_SHUTDOWN_GRACE_SECONDS = env_number(
    "GATEWAY_SHUTDOWN_GRACE_SECONDS", default=30.0, minimum=0, maximum=3600
)
# Budgets (docs/budgets.md): the output tokens reserved for a chat request that names no maximum,
# and how long a reservation nobody settled (its process died) holds before it is given back.
GATEWAY_BUDGET_DEFAULT_MAX_TOKENS = env_number(
    "GATEWAY_BUDGET_DEFAULT_MAX_TOKENS", default=4096, minimum=1, maximum=10_000_000
)
GATEWAY_BUDGET_RESERVATION_SECONDS = env_number(
    "GATEWAY_BUDGET_RESERVATION_SECONDS", default=900.0, minimum=10, maximum=86_400
)

# Policies (docs/policies.md): the most one request's policy patterns may run over its text before
# the request is refused (fail closed: a redaction that could not finish never lets the text through).
GATEWAY_POLICY_TIMEOUT_SECONDS = env_number(
    "GATEWAY_POLICY_TIMEOUT_SECONDS", default=0.05, minimum=0.001, maximum=10.0
)

# The response cache (docs/cache.md). L1: each server process's own, bounded in entries and bytes.
GATEWAY_CACHE_L1_MAX_ENTRIES = env_number(
    "GATEWAY_CACHE_L1_MAX_ENTRIES", default=10_000, minimum=0, maximum=10_000_000
)
GATEWAY_CACHE_L1_MAX_BYTES = env_number(
    "GATEWAY_CACHE_L1_MAX_BYTES", default=64 * 1024 * 1024, minimum=0, maximum=64 * 1024**3
)
# An answer larger than this is never cached (in any tier).
GATEWAY_CACHE_MAX_ENTRY_BYTES = env_number(
    "GATEWAY_CACHE_MAX_ENTRY_BYTES", default=1024 * 1024, minimum=1024, maximum=64 * 1024 * 1024
)
# L3 (semantic): the most recent entries per organization and model compared in memory.
GATEWAY_CACHE_L3_CANDIDATES = env_number(
    "GATEWAY_CACHE_L3_CANDIDATES", default=10_000, minimum=1, maximum=1_000_000
)
# How often a process looks for L3 entries other processes added.
GATEWAY_CACHE_L3_REFRESH_SECONDS = env_number(
    "GATEWAY_CACHE_L3_REFRESH_SECONDS", default=5.0, minimum=0.1, maximum=3600
)
GATEWAY_BREAKER_FAILURES = env_number("GATEWAY_BREAKER_FAILURES", default=3, minimum=1, maximum=1000)
GATEWAY_BREAKER_COOLDOWN_SECONDS = env_number(
    "GATEWAY_BREAKER_COOLDOWN_SECONDS", default=30.0, minimum=1, maximum=3600
)
GATEWAY_UPSTREAM_MAX_CONNECTIONS = env_number(
    "GATEWAY_UPSTREAM_MAX_CONNECTIONS", default=1000, minimum=1, maximum=100_000
)

# --- The off-request path (apps/outbox) and the audit log (apps/audit) -----------------------
# This node's spool: every server process appends what a request leaves behind here as the answer
# is sent; the ingest (a Celery worker's thread, or `manage.py outbox_ingest`) writes it to the
# database. Keep it on a persistent local disk (docs/audit-log.md).
GATEWAY_OUTBOX_DIR = env.str("GATEWAY_OUTBOX_DIR", default=str(DATA_DIR / "outbox"))
# How often a server process fsyncs its spool file and hands it to the ingest: the most a machine
# crash can lose (a killed process loses nothing), and about how soon entries reach the database.
GATEWAY_OUTBOX_FSYNC_SECONDS = env_number(
    "GATEWAY_OUTBOX_FSYNC_SECONDS", default=0.2, minimum=0.01, maximum=60.0
)
# How often the ingest looks at the spool, and how many items it writes per insert. Once a second:
# at 0.2 s the ingest's CPU, woken five times as often, showed at the proxy's p99 in make bench on
# 2 shared cores (+3.7-4.3 ms against +1.6-2.2 ms; docs/benchmarks.md); entries reach the database
# about a second after their answer instead.
GATEWAY_OUTBOX_INGEST_SECONDS = env_number(
    "GATEWAY_OUTBOX_INGEST_SECONDS", default=1.0, minimum=0.01, maximum=60.0
)
GATEWAY_OUTBOX_BATCH_SIZE = env_number("GATEWAY_OUTBOX_BATCH_SIZE", default=500, minimum=1, maximum=10_000)
# /readyz answers 503 while a spool file has waited longer than this for the ingest
# (gateway_project/health.py): what the requests left behind is not reaching the database.
GATEWAY_READYZ_OUTBOX_MAX_AGE_SECONDS = env_number(
    "GATEWAY_READYZ_OUTBOX_MAX_AGE_SECONDS", default=120.0, minimum=1, maximum=86_400
)
# Feedback on a request whose audit entry is not written yet waits this long for it (then it is
# dropped: the gateway never answered that id, or the ingest is far behind), and at most this many
# posts of one organization wait at a time (more: 429 feedback_pending_limit). docs/experiments.md.
GATEWAY_FEEDBACK_PENDING_SECONDS = env_number(
    "GATEWAY_FEEDBACK_PENDING_SECONDS", default=86_400, minimum=60, maximum=30 * 86_400
)
GATEWAY_FEEDBACK_PENDING_MAX = env_number(
    "GATEWAY_FEEDBACK_PENDING_MAX", default=10_000, minimum=1, maximum=10_000_000
)
# Off only to measure what the audit path costs (make bench); a gateway without it has no audit log.
GATEWAY_AUDIT_ENABLED = env.bool("GATEWAY_AUDIT_ENABLED", default=True)
# Request and response bodies kept in an audit entry are cut at this many bytes each.
GATEWAY_AUDIT_MAX_BODY_BYTES = env_number(
    "GATEWAY_AUDIT_MAX_BODY_BYTES", default=64 * 1024, minimum=0, maximum=16 * 1024 * 1024
)
# Stored Responses (apps/conversations): how long the hot tier (this process, or Redis) keeps a turn
# for a follow-up, before the database answers for it; and the embedded tier's bound in bytes.
GATEWAY_RESPONSES_HOT_SECONDS = env_number(
    "GATEWAY_RESPONSES_HOT_SECONDS", default=3600, minimum=1, maximum=7 * 24 * 3600
)
GATEWAY_RESPONSES_HOT_BYTES = env_number(
    "GATEWAY_RESPONSES_HOT_BYTES", default=64 * 1024 * 1024, minimum=0, maximum=4 * 1024 * 1024 * 1024
)
# Retention (apps/audit/retention.py) deletes expired entries this many at a time.
GATEWAY_AUDIT_RETENTION_BATCH_SIZE = env_number(
    "GATEWAY_AUDIT_RETENTION_BATCH_SIZE", default=1000, minimum=1, maximum=100_000
)
