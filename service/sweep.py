"""The API's sweep (DESIGN §5): what a run left behind when a process died is settled here, every
``inline_sweep_seconds`` in each API process (:meth:`Sweep.sweeping`), and nothing else. A mixin
of :class:`~signoff.service.runs.RunService`: it uses the service's store, settings, backends and
its supersede, and the service keeps one face for the API, the CLI and the tests.

- runs left ``queued`` by a submit that died get their workflow, and that submit's supersede
  is finished (:meth:`Sweep.start_unstarted`);
- the workflows of runs ended here and not yet let go of are cancelled (:meth:`Sweep.release_due`);
- checkpoints past their TTL or of ended runs, decision links long expired, contact
  confirmations expired, and runs past SIGNOFF_RUN_RETENTION_DAYS are deleted.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import timedelta

from signoff.engine.errors import Unavailable
from signoff.engine.models import utcnow
from signoff.service.periodic import periodically

# The most runs one round of the sweep deletes for SIGNOFF_RUN_RETENTION_DAYS (each its own
# transaction): a backlog (a retention first set on a large database) goes over many rounds
RETENTION_BATCH = 500

# How long a decision link is kept after it expired (docs/channels.md)
LINK_KEEP_DAYS = 30

log = logging.getLogger("signoff.service")


class Sweep:
    async def start_unstarted(self, *, older_than: float | None = None) -> list[str]:
        """Start the workflow of runs left ``queued`` by a submit that died (TemporalBackend),
        and finish that submit's supersede."""
        started = await self.temporal.recover(older_than=older_than)
        await self._finish_supersedes(started)
        return started

    async def _finish_supersedes(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            job = await self.store.get_job(job_id)
            if job is not None:
                await self.supersede(job, older_only=True)

    async def recover(self) -> None:
        """One round of the API's sweep: each backend settles the runs it lost (inline runs of a
        dead process end as ``failed``, runs left without their workflow get it), checkpoints
        past ``checkpoint_ttl_seconds`` are deleted, decision links long expired, and runs past
        SIGNOFF_RUN_RETENTION_DAYS."""
        for backend in self.backends.values():
            started = await backend.recover()
            if backend is self.temporal and started:
                await self._finish_supersedes(started)  # their submits died, maybe before superseding
        await self.release_due()
        await self.store.delete_expired_checkpoints(utcnow())
        # a backstop for an end's cleanup cut short by a process killed mid-write (a late
        # checkpoint of a run that ended): an ended run keeps none
        await self.store.delete_checkpoints_of_ended_runs()
        # decision links expired for LINK_KEEP_DAYS: until then an expired link still shows its
        # person what became of the request (never a bare 404)
        await self.store.delete_expired_links(utcnow() - timedelta(days=LINK_KEEP_DAYS))
        await self.store.delete_expired_contact_tokens(utcnow())  # (kept past the re-send cap's hour)
        await self.delete_expired_runs()

    async def release_due(self, *, older_than: float = 10.0) -> list[str]:
        """Cancel the workflows of runs this service (any replica) ended and did not get to cancel
        (the process died in between, or Temporal was away): each recorded by want_release more
        than ``older_than`` seconds ago. A job that did not end (its end lost a race) has nothing
        to cancel. Returns the job ids released."""
        done = []
        for job_id in await self.store.releases_due(utcnow() - timedelta(seconds=older_than)):
            job = await self.store.get_job(job_id)
            if job is not None and job.status.terminal:
                try:
                    await self.backend_of(job).release(job_id)
                except Unavailable:
                    continue  # still away: next round
                except Exception:  # noqa: BLE001 - one run's trouble must not hold up the others'
                    log.exception("job %s: cancelling its workflow failed; tried again next round", job_id)
                    continue
                done.append(job_id)
            await self.store.released(job_id)
        if done:
            log.warning("cancelled the workflow of %d run(s) ended earlier: %s", len(done), ", ".join(done))
        return done

    def sweeping(self) -> contextlib.AbstractAsyncContextManager[None]:
        """``recover()`` now and every ``inline_sweep_seconds`` while the block runs (the API)."""
        return periodically(self.recover, self.settings.inline_sweep_seconds, name="sweep")

    async def delete_expired_runs(self) -> list[str]:
        """SIGNOFF_RUN_RETENTION_DAYS: delete the runs that ended longer ago than that, at most
        RETENTION_BATCH a round (the sweep's: the rest next round, so a backlog never stalls it).
        Unset: none (the record of who approved what stays unless the operator says)."""
        days = self.settings.run_retention_days
        if days is None:
            return []
        deleted = await self.store.delete_runs_ended_before(utcnow() - timedelta(days=days), limit=RETENTION_BATCH)
        if deleted:
            log.info("deleted %d run(s) ended more than %g days ago (SIGNOFF_RUN_RETENTION_DAYS)", len(deleted), days)
        return deleted
