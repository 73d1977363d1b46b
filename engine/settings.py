"""The one settings class. Every process (API, worker, dev, CLI) reads its configuration here.

Nothing else in signoff reads the environment. Variables use the prefix ``SIGNOFF_``. Over 500
lines on purpose: a declarative table of settings with their defaults, bounds and one-line docs.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024
DEFAULT_RUN_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
DEFAULT_RUN_MAX_CALLS = 1000
DEFAULT_RUN_MAX_TOKENS = 2_000_000


class Settings(BaseSettings):
    # hide_input_in_errors: a bad setting names itself, never the other values (API keys, passwords)
    model_config = SettingsConfigDict(env_prefix="SIGNOFF_", extra="ignore", hide_input_in_errors=True)

    home: Path = Field(Path(".signoff"), description="State folder (SQLite file, dev server data, dev key).")
    database_url: str | None = Field(
        None,
        description="sqlite:///path/to/file.db or postgresql://... ; default: a SQLite file in home.",
    )

    api_host: str = "127.0.0.1"
    api_port: int = Field(8000, ge=0, le=65535)

    temporal_address: str | None = Field(
        None, description="host:port of a Temporal frontend; unset under `signoff dev` (embedded server)."
    )
    temporal_namespace: str = "default"
    # A real cluster (README, "Running at scale"): TLS, mutual TLS, or Temporal Cloud's API key.
    temporal_tls: bool = Field(False, description="Connect to Temporal over TLS (on by itself with any setting below).")
    temporal_tls_ca: Path | None = Field(None, description="PEM file of the CA that signed the frontend's certificate "
                                         "(default: the system's roots).")
    temporal_tls_cert: Path | None = Field(None, description="PEM file of this client's certificate (mutual TLS; "
                                           "with SIGNOFF_TEMPORAL_TLS_KEY).")
    temporal_tls_key: Path | None = Field(None, description="PEM file of this client's private key (mutual TLS).")
    temporal_tls_server_name: str | None = Field(None, description="The name the frontend's certificate is checked "
                                                 "against, when it is not the address's host.")
    temporal_api_key: str | None = Field(None, description="API key for Temporal Cloud (sent as a bearer token; "
                                         "implies TLS).")
    task_queue: str = "signoff"
    dev_temporal_port: int = Field(7233, ge=0, le=65535)
    dev_ui_port: int = Field(8233, ge=0, le=65535)

    flows_dir: Path | None = None
    dev_api_key: str | None = None

    # The person's pages (api/pages, docs/pages.md)
    temporal_ui_url: str | None = Field(
        None, description="Base URL of the Temporal Web UI the run pages link to; default under `signoff dev`: "
        "http://127.0.0.1:{SIGNOFF_DEV_UI_PORT}; unset with an external Temporal: no link.",
    )
    page_session_hours: float = Field(12.0, gt=0, le=24 * 90, description="How long a signed-in page session lasts.")
    # Behind a TLS proxy (issue 28; docs/security.md, "Behind a proxy"): the origin people use, and
    # the proxies whose X-Forwarded-Proto / -For are believed.
    public_url: str | None = Field(
        None,
        description="The public origin people reach signoff at (e.g. https://signoff.example.com, behind a TLS "
        "proxy): the pages accept forms from it, their cookies are Secure when it is https, and links to "
        "signoff are built on it. An http(s) origin: no path, query or userinfo.",
    )
    trusted_proxies: str = Field(
        "127.0.0.1",
        description="Comma-separated addresses or CIDRs of the reverse proxies whose X-Forwarded-Proto and "
        "X-Forwarded-For are believed (uvicorn's forwarded-allow-ips); '*' believes any client; '' none.",
    )

    # What the client commands (`signoff submit/status/pending/resume/flows`) talk to.
    api_url: str | None = Field(None, description="Base URL of the API; default http://{api_host}:{api_port}.")
    api_key: str | None = Field(None, description="API key the client commands send as x-api-key.")

    max_suspend_seconds: int = Field(
        30 * 24 * 3600, ge=0, description="A suspended run ends as timed_out after this long; 0 = never."
    )
    checkpoint_ttl_seconds: int = Field(90 * 24 * 3600, ge=0)
    # Worker memory is bounded by its workflow cache, not by the number of suspended runs: a run
    # evicted from the cache is replayed from its (small) history when a decision arrives.
    resume_timeout_seconds: float = Field(
        30.0, gt=0, description="How long a resume waits for a worker to take the decision before answering 503."
    )
    start_grace_seconds: float = Field(
        30.0, gt=0, description="A run still queued without its workflow after this long gets it started by the API's sweep."
    )
    store_outage_seconds: float = Field(
        300.0, ge=0,
        description="How long an activity waits out a database that is away (down, restarting) before it fails and "
        "Temporal retries it; never past the activity's own timeout. The API answers 503 meanwhile.",
    )
    startup_wait_seconds: float = Field(
        60.0, ge=0,
        description="How long `signoff api` and `signoff worker` wait at start-up for the database and Temporal to "
        "answer (trying again with a backoff, saying what they wait for) before they exit; 0 = not at all.",
    )
    max_cached_workflows: int = Field(1000, ge=0, description="Workflows a worker keeps in memory (Temporal's sticky cache).")
    worker_max_activities: int = Field(
        100, ge=1,
        description="Activities one worker runs at once (Temporal's max_concurrent_activities); more wait in the "
        "task queue, where a server with fairness on (signoff dev) hands them out by user in turn.",
    )

    # Limits (bad input gets a 4xx, never a crash)
    max_body_bytes: int = Field(2 * 1024 * 1024, ge=1024)
    max_flow_nodes: int = Field(500, ge=1)
    max_string_chars: int = Field(1_000_000, ge=1)
    # 32: a real flow nests ~10 deep (flow > nodes > node > params > a JSON Schema in `fields` >
    # properties > field > items ...), a body 3 before its values (body > tweaks > node > param);
    # what is stored wraps a value a few levels more (job request, checkpoint, event), and the
    # serialisers give up at 255 (pydantic) or ~1,000 (json, Python's recursion): 32 leaves room on
    # both sides. le=128 keeps any setting under those ceilings.
    max_json_depth: int = Field(
        32, ge=8, le=128,
        description="How deeply objects and lists may nest in any JSON (or YAML) the API accepts: a flow spec, a "
                    "request body with its tweaks and decision values. Deeper: 422 naming where.",
    )
    max_fields_bytes: int = Field(
        64 * 1024, ge=1024,
        description="The largest `fields` (a Human Input's values schema) a flow may give, in bytes of its compact "
                    "JSON. Larger: the flow is refused (422 FLOW_INVALID naming the node).",
    )
    # The oversight record (DESIGN §16, docs/audit.md)
    operators: str = Field(
        "",
        description="Comma-separated user names or ids of the operators: they alone may export every run's "
        "receipts (GET /api/v1/audit/receipts, `signoff audit export`).",
    )
    audit_key_cache_seconds: float = Field(
        60.0, ge=0, le=3600,
        description="How long a process keeps the receipt signing keys it read: a key rotation made elsewhere "
        "signs that process's receipts within this time.",
    )
    max_value_items: int = Field(
        1000, ge=1,
        description="The most items an array in a decision's values may hold (whatever maxItems its schema gives), "
                    "and ten times that in all values. More: 422 INVALID_VALUES naming the field.",
    )
    max_standing: float = Field(
        86400.0, gt=0, le=366 * 86400,
        description="Seconds: the longest a standing approval (a tool approval's `remember`, DESIGN §17) may last. "
                    "A longer `for`: 422 INVALID_STANDING_APPROVAL.",
    )
    max_standing_per_user: int = Field(
        100, ge=1, le=10000,
        description="The most standing approvals one person may have in force (not revoked, not expired). One "
                    "more: 409 STANDING_APPROVAL_LIMIT.",
    )
    sync_timeout_seconds: float = Field(60.0, gt=0)
    metrics_port: int | None = Field(
        None, ge=0, le=65535,
        description="`signoff worker` serves its metrics (Prometheus) on this port at /metrics; the API serves "
        "them at its own /metrics.",
    )
    temporal_metrics_port: int | None = Field(
        None, ge=0, le=65535,
        description="The Temporal SDK's own metrics (Prometheus) of this process's client and worker, on this port.",
    )
    metrics_token: str | None = Field(
        None, description="When set, /metrics needs `Authorization: Bearer <token>` (a scraper's credential).",
    )
    metrics_max_flows: int = Field(
        50, ge=1, le=10_000,
        description="The most flows the per-flow oversight metrics give a label of their own (a flow's id), per "
        "process: the first seen (at a scrape, those with the most waiting requests); the rest are `_other`.",
    )
    write_rate: float = Field(
        20.0, ge=0,
        description="Writes (POST, PUT, PATCH, DELETE of the API; the pages' forms) one user may send a second on "
        "one API process, on average; beyond the burst 429 RATE_LIMITED with Retry-After. 0 = no limit.",
    )
    write_burst: int = Field(40, ge=1, description="How many writes a user may send at once before SIGNOFF_WRITE_RATE "
                             "paces them.")
    write_rate_total: float = Field(
        60.0, ge=0,
        description="Writes a second one API process takes from all users together, shared evenly among the users "
        "who wrote in the last 10 s: with more writers than it gives SIGNOFF_WRITE_RATE each, each may send "
        "total / writers a second (a user under that share is never refused because of others). 0 = no "
        "service-wide budget.",
    )
    resume_batch_concurrency: int = Field(
        8, ge=1, le=100,
        description="How many decisions of one batch (POST /api/v2/workflows/resume-batch, the inbox's bulk "
        "action) are under way at once; the others wait their turn.",
    )
    user_max_runs_in_flight: int = Field(
        10, ge=0,
        description="Runs one user may have queued or running at once (a run paused at a gate does not count); a "
        "submit past it is 429 RUNS_IN_FLIGHT_LIMIT with Retry-After. Counted in the job's insert, so racing submits "
        "never pass it. 0 = no limit.",
    )
    stream_recheck_seconds: float = Field(
        5.0, gt=0,
        description="How often an open live stream (job events, AG-UI, the pages' inbox, run and card) asks whether "
        "its reader may still see it while it waits (a few indexed reads each time: lower is sooner, and costs more "
        "with many idle streams); it also asks before every frame with data, and at once when this process takes "
        "a share back or ends a page session, and when a revoke in any process (the CLI) notes it in the store.",
    )
    max_streams_per_user: int = Field(
        100, ge=1,
        description="Live streams (SSE: job events, AG-UI runs, the pages' inbox, run and card updates; a sync "
        "submit's wait) one user may hold open at once on one API process; beyond it 429 TOO_MANY_STREAMS (a sync "
        "submit answers at once with the job running, as after its timeout).",
    )

    # What one user may keep in signoff's database (docs/security.md, "Budgets per user")
    user_max_stored_bytes: int = Field(
        1024 ** 3, ge=0,
        description="The bytes one user may keep in signoff's database in all (their flows' versions, their runs' "
        "requests, results, events, messages, checkpoints, spans and blobs; Store.stored_bytes); at or past it "
        "saving a flow or submitting a run is 409 STORAGE_LIMIT (runs already going finish, each bounded by "
        "SIGNOFF_RUN_MAX_OUTPUT_BYTES). 0 = no limit.",
    )
    run_retention_days: float | None = Field(
        None, gt=0,
        description="Ended runs (completed, failed, cancelled, timed out) older than this many days are deleted "
        "with everything of theirs (events, messages, checkpoints, spans, blobs: their bytes given back to the "
        "user's count) by the API's sweep, at most 500 per sweep. Unset (the default): kept forever, since the "
        "record of who approved what must not vanish unless the operator says so; each user can delete their own "
        "ended runs (DELETE /api/v2/workflows/{job_id}).",
    )

    # Reaching the person (DESIGN §14, docs/channels.md): a channel not configured is skipped
    smtp_url: str | None = Field(
        None,
        description="The SMTP server requests are mailed through: smtp://user:pass@host:port (add ?starttls=true to "
        "upgrade with STARTTLS), smtps://... for implicit TLS. Unset: no email.",
    )
    smtp_from: str | None = Field(None, description="The From address of signoff's mail (one plain address).")
    notify_timeout_seconds: float = Field(
        20.0, gt=0, le=300,
        description="The most one notification's delivery may take (an SMTP server's connect, TLS and send; a "
        "Slack call) before the attempt fails and is retried later.",
    )
    slack_bot_token: str | None = Field(None, description="The Slack app's bot token (xoxb-...): requests are "
                                        "sent as Slack messages. Unset: no Slack.")
    slack_signing_secret: str | None = Field(None, description="The Slack app's signing secret: every interaction "
                                             "(a button pressed) is checked against it (X-Slack-Signature).")
    slack_api_url: str = Field("https://slack.com/api/", description="Slack's Web API (tests point it at a fake).")
    link_ttl_seconds: float = Field(
        7 * 24 * 3600.0, gt=0, le=90 * 24 * 3600,
        description="How long a decision link works at most (it also stops at the request's deadline and once used).",
    )
    verify_ttl_seconds: float = Field(
        24 * 3600.0, gt=0, le=7 * 24 * 3600,
        description="How long a contact's confirmation link (or Slack button) works (docs/channels.md, \"Verified "
        "contacts\").",
    )
    verify_max_per_hour: int = Field(
        5, ge=1, le=100,
        description="Confirmations sent in an hour at most, per user and per address or Slack id: more is 429 "
        "RATE_LIMITED (the confirmation itself cannot be turned into a flood at someone).",
    )

    # Being asked cannot be turned into a flood (docs/security.md, "Fan-out and approvers")
    max_webhooks_per_user: int = Field(
        20, ge=1,
        description="Webhooks one user may have; registering one more is 409 WEBHOOK_LIMIT (delete one first).",
    )
    min_remind_every_seconds: float = Field(
        60.0, ge=0,
        description="The shortest remind_every a Human Input may have; a flow with a shorter one is 422 FLOW_INVALID "
        "when saved or submitted.",
    )
    max_reminders: int = Field(
        24, ge=0,
        description="Reminders one request sends at most (human_input_reminder events and their webhook deliveries); "
        "after them the request waits on without reminding. 0: no reminders at all.",
    )
    max_waiting_for_others: int = Field(
        100, ge=1,
        description="Requests of one user's runs that may wait on other people (approvers other than the user) at "
        "once; a run that would ask others once more fails with WAITING_ON_OTHERS_LIMIT.",
    )

    # Sync runs of flows with no gate run in the API process (docs/inline.md): the job holds a
    # lease renewed every heartbeat; a sweep ends a job whose lease ran out (its process died).
    inline_sync: bool = Field(True, description="Run sync runs of gate-less flows in the API process, not on Temporal.")
    inline_max_running: int = Field(
        4, ge=0,
        description="Inline runs one API process builds at once; more wait (in_progress, their lease renewed) and a "
        "freed place goes to the next user in turn, so one user's many runs never sit in front of another's. "
        "0 = no limit.",
    )
    inline_lease_seconds: float = Field(30.0, gt=0, description="How long an inline run's lease lasts unrenewed.")
    inline_heartbeat_seconds: float = Field(1.0, gt=0, description="How often an inline run checks for a stop (a read); its lease is renewed (a write) every third of inline_lease_seconds.")
    inline_sweep_seconds: float = Field(10.0, gt=0, description="How often the API and the worker end inline jobs whose lease expired.")

    # Payloads: vertex outputs larger than this travel by reference, not through Temporal history.
    inline_output_bytes: int = Field(8 * 1024, ge=0)

    # Trust (DESIGN §13; README, "Security"): what a flow may reach and spend.
    egress_allow: str = Field(
        "",
        description="What flows may dial besides the public internet: comma-separated hosts, host:port pairs and "
        "CIDRs (loopback, private, link-local and metadata addresses are refused unless listed here).",
    )
    http_max_response_bytes: int = Field(
        10 * 1024 * 1024, ge=1024,
        description="The largest response body an HTTP Request node or a model call may read; beyond it the node fails.",
    )
    http_max_timeout_seconds: float = Field(
        300.0, gt=0, description="The longest an HTTP Request node or a model call may wait, whatever its timeout param.",
    )
    max_output_bytes: int = Field(
        DEFAULT_MAX_OUTPUT_BYTES, ge=64 * 1024,
        description="The largest output one node may produce (text and values, about their JSON size); beyond it the "
        "node fails. Keep it at least SIGNOFF_HTTP_MAX_RESPONSE_BYTES.",
    )
    max_nested_runs: int = Field(
        100, ge=0, description="Nested runs (Run Flow, at any depth) one run may start in all; beyond it the node fails.",
    )
    # Budgets per run (docs/security.md, "Budgets per run"): the totals travel in the run's state
    # from layer to layer and across pauses; beyond one, the run fails with RUN_BUDGET_EXCEEDED.
    run_max_output_bytes: int = Field(
        DEFAULT_RUN_MAX_OUTPUT_BYTES, ge=64 * 1024,
        description="The output bytes one run may produce in all (every node's outputs and private state, about "
        "their JSON size, and the chat messages it stores; nested runs count against their parent's). Keep it at "
        "least SIGNOFF_MAX_OUTPUT_BYTES.",
    )
    run_max_calls: int = Field(
        DEFAULT_RUN_MAX_CALLS, ge=1,
        description="The outbound HTTP requests one run may make in all (HTTP Request nodes, model calls and their "
        "retries, an Agent's tools, redirects, nested runs').",
    )
    run_max_tokens: int = Field(
        DEFAULT_RUN_MAX_TOKENS, ge=0,
        description="The model tokens one run may use in all, as the model's answers report them (usage."
        "total_tokens); 0: no limit. Answers without usage are not counted.",
    )
    secret_key: str | None = Field(
        None,
        description="The key that encrypts stored secrets (Fernet, urlsafe base64 of 32 bytes). Unset: a key kept "
        "in SIGNOFF_HOME/secret.key (made on first use); every API and worker replica must use the same one.",
    )

    # Agent defaults (an Agent's params win). SIGNOFF_OPENAI_* first, else the usual OPENAI_*.
    openai_base_url: str | None = Field(
        None, validation_alias=AliasChoices("signoff_openai_base_url", "openai_base_url")
    )
    openai_api_key: str | None = Field(None, validation_alias=AliasChoices("signoff_openai_api_key", "openai_api_key"))
    openai_model: str = Field("gpt-4o-mini", validation_alias=AliasChoices("signoff_openai_model", "openai_model"))

    # Tracing export (docs/tracing.md): the standard OpenTelemetry variables are honoured; when
    # neither is set, spans go to the store only. The OTLP/HTTP exporter reads its other standard
    # variables (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION) itself.
    otlp_endpoint: str | None = Field(
        None,
        validation_alias=AliasChoices("otlp_endpoint", "SIGNOFF_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="Base URL of an OTLP/HTTP collector (traces go to {url}/v1/traces).",
    )
    otlp_traces_endpoint: str | None = Field(
        None,
        validation_alias=AliasChoices(
            "otlp_traces_endpoint", "SIGNOFF_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        ),
        description="Full URL of an OTLP/HTTP traces endpoint (wins over otlp_endpoint).",
    )

    @model_validator(mode="after")
    def _check_temporal_tls(self) -> "Settings":
        if (self.temporal_tls_cert is None) != (self.temporal_tls_key is None):
            raise ValueError("SIGNOFF_TEMPORAL_TLS_CERT and SIGNOFF_TEMPORAL_TLS_KEY go together (mutual TLS): set both")
        for name in ("temporal_tls_ca", "temporal_tls_cert", "temporal_tls_key"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"SIGNOFF_{name.upper()}: no such file {str(path)!r}")
        return self

    @property
    def temporal_tls_enabled(self) -> bool:
        return bool(self.temporal_tls or self.temporal_tls_ca or self.temporal_tls_cert or self.temporal_tls_server_name
                    or self.temporal_api_key)

    @field_validator("egress_allow")
    @classmethod
    def _check_egress_allow(cls, v: str) -> str:
        """Read at start-up, not when a flow first dials out: a malformed entry stops every process
        at once, naming the entry."""
        from signoff.engine.egress import EgressPolicy

        EgressPolicy.parse(v)  # ValueError naming the entry
        return v

    @field_validator("inline_heartbeat_seconds")
    @classmethod
    def _check_inline_heartbeat(cls, v: float, info: ValidationInfo) -> float:
        """A beat at a third of the lease or more makes renewals (every third of it, checked at a
        beat) come late, and a live run could be swept (docs/inline.md)."""
        lease = info.data.get("inline_lease_seconds")
        if lease is not None and v >= lease / 3:
            raise ValueError(f"must be under a third of SIGNOFF_INLINE_LEASE_SECONDS ({lease:g} s): a lease "
                             f"is renewed at a beat, every third of it")
        return v

    @field_validator("smtp_url")
    @classmethod
    def _check_smtp_url(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        from signoff.engine.mail import parse_smtp_url

        parse_smtp_url(v.strip())  # ValueError saying what is wrong (never echoing the password)
        return v.strip()

    @field_validator("smtp_from")
    @classmethod
    def _check_smtp_from(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        from signoff.engine.contacts import check_email
        from signoff.engine.errors import InvalidContact

        try:
            return check_email(v)
        except InvalidContact as e:
            raise ValueError(f"SIGNOFF_SMTP_FROM: {e.message}") from None

    @property
    def email_enabled(self) -> bool:
        """Whether requests are mailed (SIGNOFF_SMTP_URL and SIGNOFF_SMTP_FROM set)."""
        return bool(self.smtp_url and self.smtp_from)

    @property
    def slack_enabled(self) -> bool:
        """Whether requests are sent to Slack (SIGNOFF_SLACK_BOT_TOKEN and SIGNOFF_SLACK_SIGNING_SECRET set)."""
        return bool(self.slack_bot_token and self.slack_signing_secret)

    @property
    def link_base_url(self) -> str:
        """What decision links are built on: SIGNOFF_PUBLIC_URL, else the API's own URL."""
        return self.public_url or self.effective_api_url

    @field_validator("public_url")
    @classmethod
    def _check_public_url(cls, v: str | None) -> str | None:
        """An http(s) origin, kept normalised (``https://host[:port]``: lower case, no default port,
        no trailing slash)."""
        if v is None or not v.strip():
            return None
        try:
            parts = urlsplit(v.strip())
            port = parts.port
        except ValueError:
            raise ValueError("SIGNOFF_PUBLIC_URL is not a URL") from None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError("SIGNOFF_PUBLIC_URL must be an http(s) URL with a host, e.g. https://signoff.example.com")
        if parts.username is not None or parts.password is not None or parts.query or parts.fragment \
                or parts.path not in ("", "/"):
            raise ValueError("SIGNOFF_PUBLIC_URL must be an origin (scheme, host, port): no path, query, fragment "
                             "or userinfo")
        scheme, host = parts.scheme.lower(), parts.hostname.lower()
        host = f"[{host}]" if ":" in host else host
        default = 443 if scheme == "https" else 80
        return f"{scheme}://{host}" + (f":{port}" if port is not None and port != default else "")

    @property
    def public_https(self) -> bool:
        """Whether people reach signoff over https (SIGNOFF_PUBLIC_URL): its cookies are Secure."""
        return bool(self.public_url and self.public_url.startswith("https://"))

    @property
    def operator_list(self) -> list[str]:
        return [p.strip() for p in self.operators.split(",") if p.strip()]

    @property
    def trusted_proxy_list(self) -> list[str]:
        return [p.strip() for p in self.trusted_proxies.split(",") if p.strip()]

    @field_validator("run_retention_days", mode="before")
    @classmethod
    def _unset_retention(cls, v: object) -> object:
        """An empty value (``SIGNOFF_RUN_RETENTION_DAYS=``, as a compose file passes one) is unset:
        runs are kept forever."""
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        if not (v.startswith("sqlite:") or v.startswith("postgresql://") or v.startswith("postgres://")):
            raise ValueError("must start with sqlite:/// or postgresql://")
        return v

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'signoff.db').resolve()}"

    @property
    def effective_api_url(self) -> str:
        if self.api_url:
            return self.api_url.rstrip("/")
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "::", "") else self.api_host
        return f"http://{host}:{self.api_port}"

    @property
    def otlp_traces_endpoint_resolved(self) -> str | None:
        """Where spans are exported by OTLP/HTTP, or None (the store only)."""
        if self.otlp_traces_endpoint:
            return self.otlp_traces_endpoint
        if self.otlp_endpoint:
            return self.otlp_endpoint.rstrip("/") + "/v1/traces"
        return None

    @property
    def effective_temporal_ui_url(self) -> str | None:
        if self.temporal_ui_url:
            return self.temporal_ui_url.rstrip("/")
        return f"http://127.0.0.1:{self.dev_ui_port}" if self.embedded_temporal and self.dev_ui_port else None

    @property
    def embedded_temporal(self) -> bool:
        return not self.temporal_address

    @property
    def effective_temporal_address(self) -> str:
        return self.temporal_address or f"127.0.0.1:{self.dev_temporal_port}"


def get_settings(**overrides) -> Settings:
    return Settings(**overrides)
