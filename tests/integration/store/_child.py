"""A separate process writing to a store, for the cross-process race and SIGKILL tests.

    python -m tests.integration.store._child URL burst PREFIX        # writes forever; prints each committed job id
    python -m tests.integration.store._child URL append JOB_ID N     # appends N events; prints each seq
    python -m tests.integration.store._child URL claim JOB_ID REQ    # one resume claim; prints "won" or "lost"

Every line is printed (and flushed) only after the write it names has committed. Before any
write the child prints "ready" and waits for one line on stdin, so that several children start
their writes at the same moment.
"""

from __future__ import annotations

import asyncio
import sys

from signoff.engine.models import JobStatus, NewJob
from signoff.engine.store import open_store


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def burst(store, prefix: str) -> None:
    async def writer(w: int) -> None:
        i = 0
        while True:
            i += 1
            job_id = f"{prefix}-{w}-{i}"
            await store.create_job(NewJob(job_id=job_id, flow_id=prefix, flow_version=1, user_id="u",
                                          request={"input_value": "x" * 200}))
            await store.append_event(job_id, "progress", {"i": i})
            await store.set_status(job_id, JobStatus.completed, result={"i": i})
            say(job_id)

    await asyncio.gather(*(writer(w) for w in range(4)))


async def main() -> None:
    url, mode, *args = sys.argv[1:]
    store = open_store(url)
    await store.setup()
    say("ready")
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    try:
        if mode == "burst":
            await burst(store, args[0])
        elif mode == "append":
            for _ in range(int(args[1])):
                say(str(await store.append_event(args[0], "progress", {"pid": "child"})))
        elif mode == "claim":
            say("won" if await store.claim_suspended_for_resume(args[0], args[1]) else "lost")
        else:
            raise SystemExit(f"unknown mode {mode}")
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
