"""The schema of both SQL backends, as migrations.

``setup()`` (engine/store/sql/core.py) applies, in one transaction, the entries a database
has not recorded yet; docs/store.md describes the procedure. Databases in the field record
each version they applied, which is why a shipped entry is never edited.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "MIGRATIONS_TABLE"]

# Migrations: an append-only list. Position i (1-based) is schema version i. Never edit or
# reorder an entry that has shipped; add a new one. Type names are filled in per dialect:
# {json} JSON document (TEXT on SQLite, json on PostgreSQL: kept verbatim, key order preserved)
# {ts}   timezone-aware UTC timestamp (ISO-8601 TEXT on SQLite, timestamptz on PostgreSQL)
# {blob} bytes; {serial} an auto-increment primary key giving insertion order.
# {octets}, {octet_text}: a byte length (see _octets); {blob_job} the job id in a run's blob key.


def _octets(column: str) -> str:
    """The stored size in bytes of a text or JSON column (UTF-8, as Store.stored_bytes counts it),
    in each dialect's words: SQLite's length() of text counts characters, of a BLOB bytes."""
    return f"{{octets}}(CAST({column} AS {{octet_text}}))"


MIGRATIONS: list[list[str]] = [
    # 1: the initial schema
    [
        """CREATE TABLE users (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            created_at {ts} NOT NULL)""",
        """CREATE TABLE api_keys (
            key_hash TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            created_at {ts} NOT NULL)""",
        "CREATE INDEX api_keys_user ON api_keys (user_id)",
        """CREATE TABLE flows (
            id TEXT PRIMARY KEY,
            owner_id TEXT NOT NULL,
            name TEXT NOT NULL,
            spec {json} NOT NULL,
            version INTEGER NOT NULL,
            created_at {ts} NOT NULL,
            updated_at {ts} NOT NULL)""",
        "CREATE INDEX flows_owner ON flows (owner_id)",
        """CREATE TABLE flow_versions (
            flow_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            name TEXT NOT NULL,
            spec {json} NOT NULL,
            created_at {ts} NOT NULL,
            PRIMARY KEY (flow_id, version))""",
        """CREATE TABLE flow_shares (
            flow_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            actions TEXT NOT NULL,
            created_at {ts} NOT NULL,
            PRIMARY KEY (flow_id, user_id))""",
        "CREATE INDEX flow_shares_user ON flow_shares (user_id)",
        """CREATE TABLE jobs (
            job_id TEXT PRIMARY KEY,
            flow_id TEXT NOT NULL,
            flow_version INTEGER NOT NULL,
            user_id TEXT NOT NULL,
            session_id TEXT,
            status TEXT NOT NULL,
            request {json} NOT NULL,
            result {json},
            error {json},
            pending {json},
            pending_request_id TEXT,
            claim_token TEXT,
            run_id TEXT NOT NULL,
            idempotency_key TEXT,
            created_at {ts} NOT NULL,
            updated_at {ts} NOT NULL,
            finished_at {ts})""",
        "CREATE UNIQUE INDEX jobs_idempotency ON jobs (user_id, idempotency_key)",
        "CREATE INDEX jobs_flow_user_status ON jobs (flow_id, user_id, status)",
        "CREATE INDEX jobs_user_status ON jobs (user_id, status)",
        """CREATE TABLE job_event_seq (
            job_id TEXT PRIMARY KEY,
            last_seq BIGINT NOT NULL)""",
        """CREATE TABLE events (
            job_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            event TEXT NOT NULL,
            data {json} NOT NULL,
            created_at {ts} NOT NULL,
            PRIMARY KEY (job_id, seq))""",
        """CREATE TABLE checkpoints (
            pos {serial},
            id TEXT NOT NULL UNIQUE,
            run_id TEXT NOT NULL,
            job_id TEXT,
            data {json} NOT NULL,
            created_at {ts} NOT NULL,
            expires_at {ts})""",
        "CREATE INDEX checkpoints_run ON checkpoints (run_id, pos)",
        "CREATE INDEX checkpoints_expiry ON checkpoints (expires_at)",
        """CREATE TABLE messages (
            pos {serial},
            id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            flow_id TEXT,
            job_id TEXT,
            sender TEXT NOT NULL,
            sender_name TEXT NOT NULL,
            text TEXT NOT NULL,
            kind TEXT NOT NULL,
            card {json},
            card_request_id TEXT,
            submitted_action TEXT,
            superseded INTEGER NOT NULL DEFAULT 0,
            created_at {ts} NOT NULL)""",
        "CREATE INDEX messages_session ON messages (session_id, created_at, pos)",
        "CREATE INDEX messages_card ON messages (card_request_id)",
        "CREATE INDEX messages_job ON messages (job_id)",
        """CREATE TABLE spans (
            trace_id TEXT NOT NULL,
            span_id TEXT NOT NULL,
            parent_id TEXT,
            name TEXT NOT NULL,
            type TEXT NOT NULL,
            start_time {ts} NOT NULL,
            end_time {ts},
            status TEXT NOT NULL,
            inputs {json} NOT NULL,
            outputs {json} NOT NULL,
            attributes {json} NOT NULL,
            run_id TEXT,
            flow_id TEXT,
            PRIMARY KEY (trace_id, span_id))""",
        "CREATE INDEX spans_flow ON spans (flow_id)",
        "CREATE INDEX spans_start ON spans (start_time)",
        """CREATE TABLE blobs (
            key TEXT PRIMARY KEY,
            data {blob} NOT NULL,
            created_at {ts} NOT NULL)""",
    ],
    # 2: idempotent event appends (a retried activity writes its event once)
    [
        "ALTER TABLE events ADD COLUMN dedupe_key TEXT",
        "CREATE UNIQUE INDEX events_dedupe ON events (job_id, dedupe_key)",
    ],
    # 3: inline runs (docs/inline.md): a lease renewed by the process running the job, and a
    # durable stop request that process checks
    [
        "ALTER TABLE jobs ADD COLUMN lease_until {ts}",
        "ALTER TABLE jobs ADD COLUMN cancel_requested_at {ts}",
        "CREATE INDEX jobs_lease ON jobs (lease_until)",
    ],
    # 4: finding runs whose workflow was never started (list_unstarted)
    [
        "CREATE INDEX jobs_status_created ON jobs (status, created_at)",
    ],
    # 5: secrets (named credentials of a user, encrypted by the caller: opaque bytes here);
    # a flow's jobs that are not over (list_active_jobs; a user's use jobs_user_status); the
    # traces of a user's runs (list_traces(user_id=...) finds the spans of each run)
    [
        """CREATE TABLE secrets (
            owner_id TEXT NOT NULL,
            name TEXT NOT NULL,
            ciphertext {blob} NOT NULL,
            created_at {ts} NOT NULL,
            updated_at {ts} NOT NULL,
            PRIMARY KEY (owner_id, name))""",
        "CREATE INDEX jobs_flow_status ON jobs (flow_id, status, created_at)",
        "CREATE INDEX spans_run ON spans (run_id)",
    ],
    # 6: decisions people can trust (DESIGN §9): groups of approvers (a group is its owner's:
    # the name is unique per owner), who may decide each pending request (approver references,
    # with a group's owner and name kept apart so a match is by both, never by text), webhooks
    # and their delivery log
    [
        """CREATE TABLE user_groups (
            owner_id TEXT NOT NULL,
            name TEXT NOT NULL,
            created_at {ts} NOT NULL,
            PRIMARY KEY (owner_id, name))""",
        """CREATE TABLE group_members (
            owner_id TEXT NOT NULL,
            name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            created_at {ts} NOT NULL,
            PRIMARY KEY (owner_id, name, user_id))""",
        "CREATE INDEX group_members_user ON group_members (user_id)",
        """CREATE TABLE request_approvers (
            pos {serial},
            job_id TEXT NOT NULL,
            request_id TEXT NOT NULL,
            ref TEXT NOT NULL,
            user_id TEXT,
            group_owner TEXT,
            group_name TEXT,
            UNIQUE (job_id, request_id, ref))""",
        "CREATE INDEX request_approvers_user ON request_approvers (user_id)",
        "CREATE INDEX request_approvers_group ON request_approvers (group_owner, group_name)",
        """CREATE TABLE webhooks (
            id TEXT PRIMARY KEY,
            owner_id TEXT NOT NULL,
            url TEXT NOT NULL,
            events {json} NOT NULL,
            secret_ciphertext {blob} NOT NULL,
            created_at {ts} NOT NULL)""",
        "CREATE INDEX webhooks_owner ON webhooks (owner_id, created_at)",
        """CREATE TABLE webhook_deliveries (
            pos {serial},
            id TEXT NOT NULL UNIQUE,
            webhook_id TEXT NOT NULL,
            event TEXT NOT NULL,
            job_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            attempt INTEGER NOT NULL,
            status_code INTEGER,
            error TEXT,
            delivered INTEGER NOT NULL,
            at {ts} NOT NULL)""",
        "CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (webhook_id, pos)",
    ],
    # 7: who took part in a run (DESIGN §9, §10): who voted on or decided its requests, kept after
    # the run ends (a person's decision history; a voter still sees the run); the workflows still
    # to cancel of runs the service ended
    [
        """CREATE TABLE job_participants (
            user_id TEXT NOT NULL,
            job_id TEXT NOT NULL,
            created_at {ts} NOT NULL,
            PRIMARY KEY (user_id, job_id))""",
        "CREATE INDEX job_participants_job ON job_participants (job_id)",
        # who voted on or decided runs before this table: read once from their events, only where
        # the name is a user's id (earlier versions recorded what a Temporal caller sent as it was)
        """INSERT INTO job_participants (user_id, job_id, created_at)
            SELECT took.who, took.job_id, MIN(took.at) FROM (
                SELECT {event_voter} AS who, job_id, created_at AS at FROM events WHERE event = 'human_input_vote'
                UNION ALL
                SELECT {event_decider} AS who, job_id, created_at AS at FROM events
                    WHERE event = 'human_input_decision'
            ) AS took JOIN users ON users.id = took.who GROUP BY took.who, took.job_id""",
        # the workflows of runs the service ended that are still to cancel (an outbox: a process
        # that dies between the end and the cancel leaves the row for the sweep)
        """CREATE TABLE workflow_releases (
            job_id TEXT PRIMARY KEY,
            created_at {ts} NOT NULL)""",
        "CREATE INDEX workflow_releases_due ON workflow_releases (created_at)",
    ],
    # 8: mutes (docs/security.md, "Fan-out and approvers"): who muted which requester; the
    # deliveries of a request skip the webhooks of the people who muted its run's owner
    [
        """CREATE TABLE user_mutes (
            user_id TEXT NOT NULL,
            muted_id TEXT NOT NULL,
            created_at {ts} NOT NULL,
            PRIMARY KEY (user_id, muted_id))""",
        "CREATE INDEX user_mutes_muted ON user_mutes (muted_id)",
    ],
    # 9: stored bytes per user (docs/security.md, "Budgets per user"): a usage row per user kept in
    # the transaction of each write it counts (Store.stored_bytes); the rows that can be deleted
    # or replaced keep their size and whom it was charged to, so a delete gives back what was
    # counted. An existing database is counted once, here.
    [
        # a user's count is the sum of a few rows (engine/store/sql/core.py: USAGE_SHARDS), so
        # concurrent runs of one user do not queue on one row
        """CREATE TABLE user_storage (
            user_id TEXT NOT NULL,
            shard INTEGER NOT NULL,
            bytes BIGINT NOT NULL,
            PRIMARY KEY (user_id, shard))""",
        "ALTER TABLE flow_versions ADD COLUMN size BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE checkpoints ADD COLUMN size BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE checkpoints ADD COLUMN charged_to TEXT",
        "ALTER TABLE spans ADD COLUMN size BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE spans ADD COLUMN charged_to TEXT",
        "ALTER TABLE blobs ADD COLUMN size BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE blobs ADD COLUMN charged_to TEXT",
        f"UPDATE flow_versions SET size = {_octets('spec')}",
        f"""UPDATE checkpoints SET size = {_octets('data')}, charged_to = (SELECT j.user_id FROM jobs j
            WHERE j.job_id = COALESCE(checkpoints.job_id, checkpoints.run_id))""",
        f"""UPDATE spans SET size = {_octets('inputs')} + {_octets('outputs')} + {_octets('attributes')},
            charged_to = (SELECT j.user_id FROM jobs j WHERE j.job_id = spans.run_id)""",
        "UPDATE blobs SET size = {octets}(data)",
        """UPDATE blobs SET charged_to = (SELECT j.user_id FROM jobs j WHERE j.job_id = {blob_job})
            WHERE substr(key, 1, 5) = 'runs/'""",
        f"""INSERT INTO user_storage (user_id, shard, bytes)
            SELECT who, 0, SUM(n) FROM (
                SELECT f.owner_id AS who, v.size AS n FROM flow_versions v JOIN flows f ON f.id = v.flow_id
                UNION ALL
                SELECT user_id AS who, {_octets('request')} + COALESCE({_octets('result')}, 0)
                    + COALESCE({_octets('error')}, 0) AS n FROM jobs
                UNION ALL
                SELECT j.user_id AS who, {_octets('e.data')} AS n FROM events e JOIN jobs j ON j.job_id = e.job_id
                UNION ALL
                SELECT j.user_id AS who, {_octets('m.text')} + COALESCE({_octets('m.card')}, 0) AS n
                    FROM messages m JOIN jobs j ON j.job_id = m.job_id
                UNION ALL
                SELECT charged_to AS who, size AS n FROM checkpoints
                UNION ALL
                SELECT charged_to AS who, size AS n FROM spans
                UNION ALL
                SELECT charged_to AS who, size AS n FROM blobs
            ) AS counted WHERE who IS NOT NULL GROUP BY who""",
    ],
    # 10: deleting ended runs (Store.delete_run, delete_runs_ended_before, SIGNOFF_RUN_RETENTION_DAYS):
    # the runs that ended longest ago are found by their end time, not among every run ever; a
    # run's checkpoints by its job id too (each delete, not a scan of every paused run's)
    [
        "CREATE INDEX jobs_finished ON jobs (finished_at, job_id)",
        "CREATE INDEX checkpoints_job ON checkpoints (job_id)",
    ],
    # 11: the inbox a page at a time (Store.inbox, inbox_count, inbox_flows; docs/pages.md): what a
    # waiting request is sorted and filtered by, in columns of the job (written with the pending
    # request by mark_suspended) instead of inside its JSON, and the indexes that give a person's
    # own waiting requests newest first and their flows, so a page of 25 reads 25 rows whatever
    # the number waiting. A request that waits now gets its pause time from when it was marked suspended
    # (updated_at, written in the same statement); whether it names approvers from its JSON.
    [
        "ALTER TABLE jobs ADD COLUMN paused_at {ts}",
        "ALTER TABLE jobs ADD COLUMN pending_kind TEXT",
        "ALTER TABLE jobs ADD COLUMN pending_names INTEGER NOT NULL DEFAULT 0",
        """UPDATE jobs SET paused_at = updated_at, pending_kind = {pending_kind},
            pending_names = CASE WHEN {pending_names} THEN 1 ELSE 0 END
            WHERE status = 'suspended' AND pending IS NOT NULL""",
        "CREATE INDEX jobs_inbox ON jobs (user_id, status, pending_names, paused_at, job_id)",
        # the flows a person's own waiting requests are of, one probe per flow (Store.inbox_flows)
        "CREATE INDEX jobs_inbox_flows ON jobs (user_id, status, pending_names, flow_id)",
    ],
    # 12: reaching the person (DESIGN §14): a user's contacts; one-time decision links (only the
    # token's hash is kept); the log of every notification sent (engine/store/sql/channels.py)
    [
        "ALTER TABLE users ADD COLUMN email TEXT",
        "ALTER TABLE users ADD COLUMN slack TEXT",
        # a Slack user id is one signoff user's (it says who pressed a button: api/routes/slack.py)
        "CREATE UNIQUE INDEX users_slack ON users (slack)",
        """CREATE TABLE decision_links (
            token_hash TEXT PRIMARY KEY,
            job_id TEXT NOT NULL,
            request_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            channel TEXT NOT NULL,
            csrf TEXT NOT NULL,
            created_at {ts} NOT NULL,
            expires_at {ts} NOT NULL,
            used_at {ts})""",
        "CREATE INDEX decision_links_job ON decision_links (job_id)",
        "CREATE INDEX decision_links_user ON decision_links (user_id)",
        """CREATE TABLE notifications (
            pos {serial},
            id TEXT NOT NULL UNIQUE,
            job_id TEXT NOT NULL,
            request_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            event TEXT NOT NULL,
            channel TEXT NOT NULL,
            user_id TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            delivered INTEGER NOT NULL,
            error TEXT,
            ref TEXT,
            at {ts} NOT NULL)""",
        "CREATE INDEX notifications_job ON notifications (job_id, pos)",
    ],
    # 13: standing approvals
    # (DESIGN §17, engine/standing.py). The rule lookup at a gated tool call is one probe of
    # standing_find (flow, tool); the list of a person's rules reads standing_maker and
    # standing_owner; the cap counts standing_maker
    [
        """CREATE TABLE standing_approvals (
            id TEXT PRIMARY KEY,
            maker_id TEXT NOT NULL,
            flow_id TEXT NOT NULL,
            flow_owner_id TEXT NOT NULL,
            tool TEXT NOT NULL,
            scope TEXT NOT NULL,
            session_id TEXT,
            session_user_id TEXT,
            job_id TEXT NOT NULL,
            request_id TEXT NOT NULL,
            created_at {ts} NOT NULL,
            expires_at {ts} NOT NULL,
            revoked_at {ts},
            uses BIGINT NOT NULL DEFAULT 0,
            last_used_at {ts})""",
        "CREATE INDEX standing_find ON standing_approvals (flow_id, tool, expires_at)",
        "CREATE INDEX standing_maker ON standing_approvals (maker_id, expires_at)",
        "CREATE INDEX standing_owner ON standing_approvals (flow_owner_id, created_at)",
    ],
    # 14: the event log's hash chain
    # (docs/audit.md, "The event log's hash chain"). Events written before it keep NULL: the
    # chain starts at a run's first event written after it, and verify reports the earlier
    # ones as before the chain (a migration cannot hash in SQL on SQLite).
    [
        "ALTER TABLE events ADD COLUMN sha256 TEXT",
        "ALTER TABLE events ADD COLUMN prev_sha256 TEXT",
    ],
    # 15: the oversight record (DESIGN §16, docs/audit.md): a signed receipt per decision, a run's
    # receipts chained in ``seq`` order (1, 2, ...), written in the transaction of the decision's
    # records; found by time (and flow) for an operator's export; deleted with the run
    [
        """CREATE TABLE receipts (
            job_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            receipt_id TEXT NOT NULL,
            flow_id TEXT NOT NULL,
            at {ts} NOT NULL,
            sha256 TEXT NOT NULL,
            body {json} NOT NULL,
            PRIMARY KEY (job_id, seq))""",
        "CREATE INDEX receipts_at ON receipts (at, job_id, seq)",
    ],
    # 16: verified contacts (docs/channels.md, "Verified contacts"): whether each contact is
    # verified (a contact set before this counts as pending: it was never checked; an operator
    # vouches for one by setting it again with `signoff users set`), and the verifications sent:
    # the token's hash only, bound to the user and the address, counted by user and by address
    # for the re-send cap
    [
        "ALTER TABLE users ADD COLUMN email_verified INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE users ADD COLUMN slack_verified INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE contact_tokens (
            token_hash TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            channel TEXT NOT NULL,
            address TEXT NOT NULL,
            csrf TEXT NOT NULL,
            created_at {ts} NOT NULL,
            expires_at {ts} NOT NULL,
            used_at {ts},
            attempts INTEGER NOT NULL DEFAULT 0,
            delivered INTEGER NOT NULL DEFAULT 0,
            error TEXT)""",
        "CREATE INDEX contact_tokens_user ON contact_tokens (user_id, created_at)",
        "CREATE INDEX contact_tokens_address ON contact_tokens (address, created_at)",
        "CREATE INDEX contact_tokens_expiry ON contact_tokens (expires_at)",
    ],
    # 17: a run's last receipt on its job row (issue 32's cost target): the seq and sha256 of the
    # receipt a new one chains after, read by the decision's claim (the UPDATE that locks the row
    # returns them) and written by the UPDATE that clears the request, so a receipt costs its one
    # INSERT; the runs that have receipts get theirs from the receipts table
    [
        "ALTER TABLE jobs ADD COLUMN receipt_seq INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN receipt_sha256 TEXT",
        "UPDATE jobs SET receipt_seq = (SELECT max(r.seq) FROM receipts r WHERE r.job_id = jobs.job_id), "
        "receipt_sha256 = (SELECT r.sha256 FROM receipts r WHERE r.job_id = jobs.job_id ORDER BY r.seq DESC LIMIT 1) "
        "WHERE job_id IN (SELECT job_id FROM receipts)",
    ],
    # 18: the deliveries of one event found by the event (issue 28: one delivery activity per
    # event, retried for the webhooks that have not taken it yet: Store.delivered_webhooks)
    [
        "CREATE INDEX webhook_deliveries_event ON webhook_deliveries (job_id, seq)",
    ],
    # 19: a submit's look for the runs it supersedes (Q.find_suspended: a user's suspended runs of
    # one flow in one effective session, oldest first) by index: jobs_flow_user_status left the session to a
    # scan of every suspended run the user has of the flow, and since issue 33 that look runs in
    # the job's insert, on SQLite holding the process's one writer (a user with 50,000 runs
    # waiting in sessions of their own made every other user's write wait ~60 ms)
    [
        "CREATE INDEX jobs_suspended_session ON jobs (user_id, flow_id, COALESCE(session_id, flow_id), created_at, "
        "job_id) WHERE status = 'suspended'",
    ],
]

MIGRATIONS_TABLE = """CREATE TABLE IF NOT EXISTS signoff_migrations (
    version INTEGER PRIMARY KEY,
    applied_at {ts} NOT NULL)"""

