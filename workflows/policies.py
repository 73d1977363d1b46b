"""FlowRun's retry policies and bounds (docs/temporal.md, "Retry policy"): what its activities
are retried with, and how much a client can make a run record or do."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# Retry policy (docs/temporal.md): component errors marked non-retryable and validation errors
# fail at once; a retryable component error or an infrastructure error (database, network) is
# retried with backoff, 5 attempts at most, so a failing component is never retried forever.
LAYER_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
    non_retryable_error_types=["NON_RETRYABLE", "FLOW_INVALID", "NESTED_GATE", "NOT_RESUMABLE", "INVALID_DECISION"],
)
# A layer heartbeats (activities/layers.py) so that a layer lost with its worker is retried on
# another worker within seconds, not after the start-to-close timeout.
LAYER_HEARTBEAT = timedelta(seconds=5)
# Bookkeeping activities only touch the store: retry longer (the database may restart).
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=20,
    non_retryable_error_types=["NON_RETRYABLE", "NOT_RESUMABLE", "INVALID_DECISION"],
)
STORE_TIMEOUT = timedelta(seconds=30)
# A notification (activities/notify.py): it bounds its own call (SIGNOFF_NOTIFY_TIMEOUT_SECONDS, at
# most 300 s); this is the backstop for an attempt whose worker went away.
NOTIFY_TIMEOUT = timedelta(seconds=330)
# A webhook delivery: backoff from 1 s to 2 min, for about 15 minutes in all; each attempt is
# logged, and a dead endpoint changes nothing for the run.
WEBHOOK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=2),
    maximum_attempts=12,
)

# How long a run that is over waits for an Update whose decision it took from the store (its own
# workflow task was lost) to come again for its answer, before it closes (FlowRun.run); also how
# long a run stopped while its decision was applied waits, in a task of its own, for the stop's
# cancel (FlowRun._drive).
ANSWER_WAIT = timedelta(seconds=10)
# After a catch-up that found nothing to go on from, the wait's end is tried again at once (the
# catch-up may have let go of a claim with nothing recorded), then, if it loses again, this much
# later each time.
CATCH_UP_RETRY = timedelta(seconds=60)
# Catch-up Updates let in per pending request (each runs a look at the store); more are refused
# without history, so a client cannot grow the run's history with them.
MAX_CATCH_UPS = 10

# A rejected ``resume`` Signal is recorded (``resume_rejected``, one activity) at most this many
# times per pending request; the rest are counted in the workflow and logged, so a client
# spamming bad Signals cannot grow the workflow's history without bound (docs/temporal.md).
MAX_RECORDED_REJECTIONS = 20
