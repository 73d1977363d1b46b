"""The signoff worker: the FlowRun workflow and its activities on one task queue.

``signoff worker`` runs it with settings from the environment and shuts down gracefully on
SIGTERM/SIGINT (in-flight activities finish; workflows simply continue on another worker).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any, Sequence

import temporalio.client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from signoff.activities.flow import FlowActivities
from signoff.activities.patient import PatientStore
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store
from signoff.workflows.caller import CallerInterceptor, CallerRunner, context_free
from signoff.workflows.flow_run import FlowRun
from signoff.workflows.whose import WhoseInterceptor

# What the worker's sandbox shares with the process instead of importing again for each run:
# the engine and pydantic (the workflow's types), and the workflow module itself.
WORKER_SANDBOX = SandboxRestrictions.default.with_passthrough_modules("signoff.engine", "signoff.workflows", "pydantic")
# The tests' strict sandbox: the workflow module imported afresh per run, as Temporal's default.
STRICT_SANDBOX = SandboxRestrictions.default.with_passthrough_modules("signoff.engine", "signoff.workflows.types",
                                                                      "pydantic")

log = logging.getLogger("signoff.worker")


def build_worker(
    client: temporalio.client.Client,
    store: Store,
    settings: Settings,
    *,
    task_queue: str | None = None,
    activities: Sequence[Any] | None = None,
    **worker_kwargs: Any,
) -> Worker:
    """A worker for FlowRun. ``activities`` replaces the real ones (tests register fakes under
    the real activity names)."""
    from signoff.engine.tracing import sdk
    from signoff.activities.telemetry import SpanFlushInterceptor
    from signoff.service import with_converter

    sdk.install(settings, service_name="signoff-worker")  # idempotent; spans need the SDK
    # the activities wait out a database that is away for a while (activities/patient.py)
    patient: Store = PatientStore(store, settings.store_outage_seconds)  # type: ignore[assignment]
    acts = list(activities) if activities is not None else FlowActivities(patient, settings).all()
    # every activity's spans reach the store before it returns (docs/tracing.md)
    # who sent each Update and Signal, handed to the workflow from the activation (workflows/caller.py)
    # and whose work each activity does, from the run's user (workflows/whose.py)
    interceptors = [SpanFlushInterceptor(patient), CallerInterceptor(), WhoseInterceptor(),
                    *worker_kwargs.pop("interceptors", [])]
    client = with_converter(client)
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=[FlowRun],
        activities=acts,
        # The workflow module is passed through too: the sandbox re-imported (and, without a
        # bytecode cache, compiled) workflows/flow_run.py for every new run, ~25 % of the
        # process's CPU per run (docs/temporal.md, "The workflow sandbox"). The replay tests
        # still run it in the strict sandbox, which catches a non-deterministic call in it.
        # signoff's converter uses no serialization context: none is asked of the sandbox per
        # payload (workflows/caller.py, issue 33)
        workflow_runner=CallerRunner(SandboxedWorkflowRunner(restrictions=WORKER_SANDBOX),
                                     context_free=context_free(client.data_converter)),
        graceful_shutdown_timeout=worker_kwargs.pop("graceful_shutdown_timeout", None) or _timedelta(10),
        interceptors=interceptors,
        max_cached_workflows=worker_kwargs.pop("max_cached_workflows", settings.max_cached_workflows),
        max_concurrent_activities=worker_kwargs.pop("max_concurrent_activities", settings.worker_max_activities),
        **worker_kwargs,
    )


def _timedelta(seconds: float):
    from datetime import timedelta

    return timedelta(seconds=seconds)


async def run_worker(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Open the store, connect to Temporal, run until ``stop`` is set or SIGTERM/SIGINT."""
    from signoff.engine.store import open_store
    from signoff.service import connect_client
    from signoff.service.startup import when_reachable

    from signoff.engine.metrics import MeteredStore

    opened = open_store(settings.resolved_database_url)
    await when_reachable("the database", opened.setup, settings.startup_wait_seconds)
    store: Store = MeteredStore(opened)  # type: ignore[assignment]  # signoff_store_seconds
    client = await when_reachable("Temporal", lambda: connect_client(settings), settings.startup_wait_seconds)
    if settings.metrics_port is not None:
        serve_metrics(settings.api_host, settings.metrics_port)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass
    worker = build_worker(client, store, settings)
    from signoff.service.inline import sweeping

    try:
        async with worker, sweeping(store, settings):  # ends inline jobs whose API process died
            log.info("worker running on task queue %s at %s", settings.task_queue, settings.effective_temporal_address)
            print(f"signoff worker: task queue {settings.task_queue!r} on {settings.effective_temporal_address}", flush=True)
            await stop.wait()
            print("signoff worker: shutting down", flush=True)
    finally:
        from signoff.engine.tracing import sdk as telemetry

        tel = telemetry.current()
        if tel is not None:
            tel.shutdown()  # push what the OTLP batch still holds
        await opened.close()


def serve_metrics(host: str, port: int) -> None:
    """The process's metrics (engine/metrics.py) at http://host:port/metrics, from a thread."""
    from prometheus_client import start_http_server

    from signoff.engine.metrics import REGISTRY

    start_http_server(port, addr=host, registry=REGISTRY)
    print(f"signoff worker: metrics on http://{host}:{port}/metrics", flush=True)
