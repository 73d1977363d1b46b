"""Inline runs: a sync run of a flow with no gate, run in the calling (API) process by the
engine's in-process runner instead of a Temporal workflow (DESIGN §8; docs/inline.md).

Such a run never pauses, so it needs none of what Temporal gives a run that waits for a person.
It keeps everything a job promises: the job row (``in_progress → completed|failed|cancelled``),
the events (each written with its status in one transaction, by :func:`end_run`), the chat
history, one trace per run, stop, and no job left ``in_progress`` forever:

- the job is created with a **lease** (``lease_until``); while the run goes, a heartbeat reads the
  job's **stop request** every ``inline_heartbeat_seconds`` (``Store.lease_state``, a read) and
  renews the lease at the first beat and then once a third of it has passed since the last
  renewal began (``Store.renew_lease``, a write; after a failed renewal, at every beat until one
  succeeds): a run's writes to keep its lease are one per ten seconds at the default 30 s lease,
  not one a second (issue 28: the lease renewals were ~7 % of the write transactions under the
  budget soak); keep ``inline_heartbeat_seconds`` well under a third of the lease;
- a stop in this process cancels the run's task; a stop on another replica writes a durable stop
  request (``Store.request_cancel``) that the owner's next heartbeat turns into the same cancel;
- a process that dies mid-run stops renewing: :func:`sweep` (at API and worker start, then every
  ``inline_sweep_seconds``) ends jobs whose lease ran out as ``failed`` with ``run_failed``
  {error: "the process running it stopped"}.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Any, ClassVar

from signoff.engine import tracing
from signoff.engine.access import Access
from signoff.engine.errors import NotResumable, SignoffError
from signoff.engine.aio import to_the_end
from signoff.engine.lifecycle import RunEnd, end_run, settle_ended
from signoff.engine.models import Decision, FlowRecord, Job, JobStatus, utcnow
from signoff.engine.runner import InProcessRunner, RunOutcome
from signoff.engine.secrets import Vault
from signoff.engine.settings import Settings
from signoff.engine.spec import FlowSpec, apply_tweaks, load_flow
from signoff.engine.store.base import Store
from signoff.engine.tracing.sdk import collect_spans
from signoff.engine.validate import flow_has_gate
from signoff.service.backend import Resumed, RunBackend, poll_job
from signoff.engine.fairgate import FairGate, acting_for
from signoff.service.periodic import periodically

log = logging.getLogger("signoff.inline")

PROCESS_STOPPED = "the process running it stopped"
LEASE_ERROR: dict[str, Any] = {"error": PROCESS_STOPPED, "type": "ProcessStopped", "vertex_id": None}

_SPEC_CACHE_SIZE = 256


def inline_spec(flow: FlowRecord, tweaks: dict[str, Any] | None) -> FlowSpec | None:
    """The flow (tweaks applied) when it can run inline: valid and without a gate. None sends the
    run to Temporal, which also reports a bad tweak or an invalid flow exactly as before."""
    try:
        spec = load_flow(apply_tweaks(flow.spec, tweaks))
    except Exception:  # noqa: BLE001 - the workflow path reports it (run_failed)
        return None
    return None if flow_has_gate(spec) else spec


def _error(err: BaseException) -> dict[str, Any]:
    """The job's error and the ``run_failed`` data, shaped as a failed workflow writes them."""
    return {
        "error": err.message if isinstance(err, SignoffError) else f"{err.__class__.__name__}: {err}",
        "type": err.__class__.__name__,
        **({"code": err.code} if isinstance(err, SignoffError) else {}),
        "vertex_id": getattr(err, "vertex_id", None),
    }


class InlineBackend(RunBackend):
    """The inline runs of this process: start, wait, stop."""

    name: ClassVar[str] = "inline"
    initial_status: ClassVar[JobStatus] = JobStatus.in_progress  # it starts at once

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping: set[str] = set()  # stop asked: a cancel of these tasks is a stop
        self._specs: OrderedDict[tuple[str, int], FlowSpec | None] = OrderedDict()
        self.access = Access(store)
        self.vault = Vault(store, settings)
        # runs building at once in this process, let in by user in turn (SIGNOFF_INLINE_MAX_RUNNING)
        self.gate = FairGate(settings.inline_max_running)

    def accepts(self, flow: FlowRecord, tweaks: dict[str, Any] | None) -> bool:
        """Whether a sync run of this flow (with these tweaks) runs inline: :func:`inline_spec`,
        remembered per flow version when there are no tweaks (a flow version never changes)."""
        return self._spec(flow, tweaks) is not None

    def _spec(self, flow: FlowRecord, tweaks: dict[str, Any] | None) -> FlowSpec | None:
        if tweaks:
            return inline_spec(flow, tweaks)
        key = (flow.id, flow.version)
        if key in self._specs:
            self._specs.move_to_end(key)
            return self._specs[key]
        spec = self._specs[key] = inline_spec(flow, None)
        while len(self._specs) > _SPEC_CACHE_SIZE:
            self._specs.popitem(last=False)
        return spec

    def lease_until(self) -> datetime:
        return utcnow() + timedelta(seconds=self.settings.inline_lease_seconds)

    async def start(self, job: Job, flow: FlowRecord) -> None:
        if job.job_id in self._tasks:
            return
        spec = self._spec(flow, job.request.get("tweaks"))
        if spec is None:  # accepts() said it could: never leave the job hanging
            await self._failed(job, flow, {"error": "the flow cannot run inline", "type": "InlineRefused",
                                           "vertex_id": None})
            return
        with acting_for(job.user_id):  # the run's writes take its user's turns (engine/fairgate.py)
            task = asyncio.create_task(self._run(job, flow, spec), name=f"signoff-inline-{job.job_id}")
        self._tasks[job.job_id] = task

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.pop(job.job_id, None)
            self._stopping.discard(job.job_id)
            if not t.cancelled() and t.exception() is not None:
                log.error("inline run %s: %r", job.job_id, t.exception())

        task.add_done_callback(done)

    async def resume(self, job: Job, request_id: str, decision: Decision, decided_by: str, *,
                     via: str | None = None, checked: str | None = None) -> Resumed:
        raise NotResumable("An inline run never waits for a decision", job_id=job.job_id)

    async def release(self, job_id: str) -> None:
        """The service ended the job: stop building it here (another process's run sees the end
        at its next heartbeat)."""
        task = self._tasks.get(job_id)
        if task is not None:
            task.cancel()

    def running(self, job_id: str) -> asyncio.Task[None] | None:
        return self._tasks.get(job_id)

    def runs_here(self, job_id: str) -> bool:
        return job_id in self._tasks

    async def wait(self, job_id: str, timeout: float) -> bool:
        task = self._tasks.get(job_id)
        if task is None:
            return True
        done, _ = await asyncio.wait({task}, timeout=timeout)
        return bool(done)

    async def stop(self, job: Job) -> Job:
        """Ask for the stop durably (the owner, in any process, sees it at its next heartbeat),
        cancel the run at once when it runs here, and wait for it to record its end; a run whose
        process died is ended by the sweep now."""
        await self.store.request_cancel(job.job_id)
        task = self._tasks.get(job.job_id)
        if task is not None:
            self._stopping.add(job.job_id)
            task.cancel()
            await asyncio.wait({task}, timeout=10.0)
        current = await poll_job(self.store, job.job_id, 10.0, lambda j: j.status.terminal)
        if not current.status.terminal:
            await sweep(self.store)  # its process may be dead: an expired lease ends it now
            current = await poll_job(self.store, job.job_id, 0, lambda j: True)
        return current

    async def recover(self) -> None:
        await sweep(self.store)

    # ---- the run -----------------------------------------------------------------------------

    async def _heartbeat(self, job_id: str, run: asyncio.Task[Any]) -> None:
        every = self.settings.inline_heartbeat_seconds
        renew_every = max(every, self.settings.inline_lease_seconds / 3)
        loop = asyncio.get_running_loop()
        # the first beat renews: the lease the job was created with began before its insert
        # and whatever came between it and this task (writes that waited their turn)
        renewed = -float("inf")
        while True:
            await asyncio.sleep(every)
            try:
                if loop.time() - renewed >= renew_every:
                    began = loop.time()  # the new lease runs from before the write waits its turn
                    state = await self.store.renew_lease(job_id, self.lease_until())
                    renewed = began
                else:
                    state = await self.store.lease_state(job_id)
            except Exception as err:  # noqa: BLE001 - a database blip: the lease has slack, try again
                log.warning("inline run %s: heartbeat failed: %r", job_id, err)
                continue
            if state == "cancel_requested":
                self._stopping.add(job_id)
            if state != "running":  # stopped, or ended by someone else (e.g. swept): stop building
                run.cancel()
                return

    async def _run(self, job: Job, flow: FlowRecord, spec: FlowSpec) -> None:
        store = self.store
        async with collect_spans(store):  # the run's spans go to the store (flushed at its end)
            beat = asyncio.create_task(self._heartbeat(job.job_id, asyncio.current_task()))  # type: ignore[arg-type]
            try:
                # the job was created in_progress (RunService.submit): no status write here
                runner = InProcessRunner(
                    store, store, self.access.flow_loader(job.user_id), secrets=self.vault.value, settings=self.settings,
                    tracing=tracing.RunTracing(store, started_at=lambda _s: job.created_at, name=flow.name),
                )
                # its turn among the runs of this process (the lease is renewed while it waits)
                async with self.gate.hold(job.user_id):
                    outcome = await runner.start(
                        spec, run_id=job.run_id, job_id=job.job_id, flow_id=job.flow_id, user_id=job.user_id,
                        owner_id=flow.owner_id, session_id=job.session_id, input_value=job.request.get("input_value"),
                    )
            except asyncio.CancelledError:
                beat.cancel()
                await to_the_end(self._cancelled(job, flow))
                raise
            except Exception as err:  # noqa: BLE001 - e.g. the database: the run fails, said so
                beat.cancel()
                await to_the_end(self._failed(job, flow, _error(err)))
                return
            finally:
                beat.cancel()
            await to_the_end(self._ended(job, flow, outcome))

    async def _ended(self, job: Job, flow: FlowRecord, outcome: RunOutcome) -> None:
        # the runner emitted and flushed the root span before returning: the trace is whole
        # before the status says the run ended (docs/tracing.md)
        if outcome.status == "completed":
            await end_run(self.store, job.job_id, RunEnd(JobStatus.completed, result=outcome.result),
                          expect=[JobStatus.in_progress], traced=True, name=flow.name)
        elif outcome.status == "failed":
            err = outcome.error or {}
            await self._failed(job, flow, {"error": err.get("error"), "type": err.get("type"),
                                           **({"code": err["code"]} if err.get("code") else {}),
                                           "vertex_id": err.get("vertex_id")}, traced=True)
        else:  # paused: flow_has_gate said it could not; never leave it hanging
            await self._failed(job, flow, {"error": "the run paused, but it was run without Temporal",
                                           "type": "InlinePause", "vertex_id": outcome.state.pending_vertex})

    async def _failed(self, job: Job, flow: FlowRecord, error: dict[str, Any], *, traced: bool = False) -> None:
        await end_run(self.store, job.job_id, RunEnd(JobStatus.failed, error=error),
                      expect=[JobStatus.queued, JobStatus.in_progress], traced=traced, name=flow.name)

    async def _cancelled(self, job: Job, flow: FlowRecord) -> None:
        """A stop (here or from another replica) ends the job ``cancelled``; any other cancel of
        the task (the process shutting down) ends it ``failed``, as the sweep would."""
        if job.job_id in self._stopping:
            await end_run(self.store, job.job_id, RunEnd(JobStatus.cancelled),
                          expect=[JobStatus.queued, JobStatus.in_progress], name=flow.name)
        else:
            await self._failed(job, flow, dict(LEASE_ERROR))


# ---- the sweep ---------------------------------------------------------------------------------


async def sweep(store: Store) -> list[str]:
    """End the inline jobs whose lease ran out (their process died) as ``failed`` with
    ``run_failed`` {error: "the process running it stopped"}; close their traces. Returns the
    job ids ended."""
    ended = await store.fail_expired_leases(utcnow(), dict(LEASE_ERROR))
    for job_id in ended:
        job = await store.get_job(job_id)
        if job is not None:
            await settle_ended(store, job)
    if ended:
        log.warning("ended %d inline job(s) whose process stopped: %s", len(ended), ", ".join(ended))
    return ended


def sweeping(store: Store, settings: Settings) -> contextlib.AbstractAsyncContextManager[None]:
    """Sweep now, then every ``inline_sweep_seconds`` while the block runs (the worker)."""
    return periodically(lambda: sweep(store), settings.inline_sweep_seconds, name="inline-sweep")


__all__ = ["InlineBackend", "LEASE_ERROR", "PROCESS_STOPPED", "inline_spec", "sweep", "sweeping"]
