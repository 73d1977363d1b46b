"""The named queries of both SQL backends (``?`` placeholders).

One text per query serves SQLite and PostgreSQL: both accept the same
``INSERT … ON CONFLICT … DO UPDATE/NOTHING … RETURNING``, and the PostgreSQL backend rewrites
``?`` to ``%s`` once per query. Keeping them in one class, apart from the methods, lets a
reader check every statement that touches a table in one place. Over 500 lines on purpose: a
declarative table of statements, no logic.
"""

from __future__ import annotations

__all__ = ["Q"]


class Q:
    insert_user = "INSERT INTO users (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING RETURNING *"
    user_by_id = "SELECT * FROM users WHERE id = ?"
    user_by_name = "SELECT * FROM users WHERE name = ?"
    list_users = "SELECT * FROM users ORDER BY name LIMIT ?"
    insert_api_key = (
        "INSERT INTO api_keys (key_hash, user_id, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING RETURNING key_hash"
    )
    api_key_owner = "SELECT user_id FROM api_keys WHERE key_hash = ?"
    user_for_api_key = "SELECT u.* FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.key_hash = ?"
    delete_api_key = "DELETE FROM api_keys WHERE key_hash = ?"
    delete_user_api_keys = "DELETE FROM api_keys WHERE user_id = ?"
    # delete_user: the user row, then what hangs on its id (one transaction)
    delete_user = "DELETE FROM users WHERE id = ?"
    delete_shares_to_user = "DELETE FROM flow_shares WHERE user_id = ?"
    delete_shares_of_owner = "DELETE FROM flow_shares WHERE flow_id IN (SELECT f.id FROM flows f WHERE f.owner_id = ?)"
    delete_owner_secrets = "DELETE FROM secrets WHERE owner_id = ?"
    delete_user_memberships = "DELETE FROM group_members WHERE user_id = ?"
    delete_owner_groups = "DELETE FROM user_groups WHERE owner_id = ?"
    delete_owner_group_members = "DELETE FROM group_members WHERE owner_id = ?"
    delete_owner_webhook_deliveries = (
        "DELETE FROM webhook_deliveries WHERE webhook_id IN (SELECT w.id FROM webhooks w WHERE w.owner_id = ?)"
    )
    delete_owner_webhooks = "DELETE FROM webhooks WHERE owner_id = ?"
    delete_user_mutes = "DELETE FROM user_mutes WHERE user_id = ? OR muted_id = ?"

    # groups of approvers: (owner_id, name) is the key. A change of members first locks the
    # group row (a no-op UPDATE whose row count says whether the group exists), so a concurrent
    # delete_group either ran before (no group: nothing written) or waits and then deletes the
    # members added too: no member row ever outlives its group.
    insert_group = (
        "INSERT INTO user_groups (owner_id, name, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING RETURNING *"
    )
    lock_group = "UPDATE user_groups SET created_at = created_at WHERE owner_id = ? AND name = ?"
    group_with_members = (
        "SELECT g.owner_id, g.name, g.created_at, m.user_id FROM user_groups g LEFT JOIN group_members m "
        "ON m.owner_id = g.owner_id AND m.name = g.name WHERE g.owner_id = ? AND g.name = ?"
    )
    groups_with_members = (
        "SELECT g.owner_id, g.name, g.created_at, m.user_id FROM user_groups g LEFT JOIN group_members m "
        "ON m.owner_id = g.owner_id AND m.name = g.name WHERE g.owner_id = ?"
    )
    insert_group_member = (
        "INSERT INTO group_members (owner_id, name, user_id, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
    )
    delete_group_member = "DELETE FROM group_members WHERE owner_id = ? AND name = ? AND user_id = ?"
    delete_group = "DELETE FROM user_groups WHERE owner_id = ? AND name = ?"
    delete_group_members = "DELETE FROM group_members WHERE owner_id = ? AND name = ?"
    group_member_ids = "SELECT user_id FROM group_members WHERE owner_id = ? AND name = ?"
    # record_decision's carried check (issue 33): an access note of the decider since the API checked
    access_changed_since = "SELECT 1 AS changed FROM events WHERE job_id = ? AND created_at > ? LIMIT 1"
    groups_of = (
        "SELECT m.owner_id, m.name FROM group_members m JOIN user_groups g ON g.owner_id = m.owner_id "
        "AND g.name = m.name WHERE m.user_id = ?"
    )

    # approver references of a job's requests; a group reference is matched by its owner and
    # name columns, never by its text
    lock_job = "UPDATE jobs SET updated_at = updated_at WHERE job_id = ?"
    delete_request_approvers = "DELETE FROM request_approvers WHERE job_id = ? AND request_id = ?"
    insert_request_approver = (
        "INSERT INTO request_approvers (job_id, request_id, ref, user_id, group_owner, group_name) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, request_id, ref) DO NOTHING"
    )
    request_approvers = "SELECT ref FROM request_approvers WHERE job_id = ? AND request_id = ? ORDER BY pos"
    delete_job_approvers = "DELETE FROM request_approvers WHERE job_id = ?"
    insert_participant = (
        "INSERT INTO job_participants (user_id, job_id, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
    )
    participated_jobs = (
        "SELECT j.* FROM job_participants p JOIN jobs j ON j.job_id = p.job_id WHERE p.user_id = ? "
        "ORDER BY j.created_at DESC, j.job_id DESC LIMIT ?"
    )
    took_part = "SELECT 1 AS found FROM job_participants WHERE job_id = ? AND user_id = ?"
    delete_user_participation = "DELETE FROM job_participants WHERE user_id = ?"
    # the candidates come from the user's side (request_approvers_user, group_members_user and
    # request_approvers_group), each checked against the job's current request
    assigned_pending = (
        "SELECT j.* FROM jobs j WHERE j.job_id IN ("
        "SELECT a.job_id FROM request_approvers a JOIN jobs k ON k.job_id = a.job_id "
        "AND k.pending_request_id = a.request_id AND k.status = 'suspended' WHERE a.user_id = ? "
        "UNION SELECT a.job_id FROM group_members m JOIN user_groups g ON g.owner_id = m.owner_id AND g.name = m.name "
        "JOIN request_approvers a ON a.group_owner = m.owner_id AND a.group_name = m.name "
        "JOIN jobs k ON k.job_id = a.job_id AND k.pending_request_id = a.request_id AND k.status = 'suspended' "
        "WHERE m.user_id = ?)"
    )
    # the inbox (Store.inbox), in two parts whose rows never overlap: the user's own waiting
    # requests that name no approvers (jobs_inbox: newest first, and counted, from the index),
    # and the requests naming the user or a group of theirs (request_approvers_user,
    # group_members_user, request_approvers_group, each checked against the job's current
    # request) but none of a requester the user muted; {f} is each branch's filters. A
    # suspended job always has its pending request and its pause time (mark_suspended writes
    # them together; ``paused_at IS NOT NULL`` lets a planner without statistics see jobs_inbox).
    inbox_own = (
        "SELECT j.job_id, j.paused_at, j.flow_id, j.session_id, j.pending_request_id, j.pending_kind FROM jobs j WHERE j.user_id = ? AND j.status = 'suspended' "
        "AND j.pending_names = 0 AND j.paused_at IS NOT NULL{f}"
    )
    # the distinct flows of the own part, one index probe each (jobs_inbox_flows: a loose index scan)
    inbox_own_flows = (
        "WITH RECURSIVE f(flow_id) AS (SELECT (SELECT flow_id FROM jobs WHERE user_id = ? AND status = 'suspended' "
        "AND pending_names = 0 ORDER BY flow_id LIMIT 1) UNION ALL SELECT (SELECT j.flow_id FROM jobs j "
        "WHERE j.user_id = ? AND j.status = 'suspended' AND j.pending_names = 0 AND j.flow_id > f.flow_id "
        "ORDER BY j.flow_id LIMIT 1) FROM f WHERE f.flow_id IS NOT NULL) SELECT flow_id FROM f WHERE flow_id IS NOT NULL"
    )
    inbox_assigned = (
        "SELECT j.job_id, j.paused_at, j.flow_id, j.session_id, j.pending_request_id, j.pending_kind FROM request_approvers a JOIN jobs j ON j.job_id = a.job_id "
        "AND j.pending_request_id = a.request_id AND j.status = 'suspended' WHERE a.user_id = ? "
        "AND NOT (j.user_id = ? AND j.pending_names = 0) "
        "AND (j.user_id = ? OR j.user_id NOT IN (SELECT muted_id FROM user_mutes WHERE user_id = ?)){f} "
        "UNION SELECT j.job_id, j.paused_at, j.flow_id, j.session_id, j.pending_request_id, j.pending_kind FROM group_members m JOIN user_groups g "
        "ON g.owner_id = m.owner_id AND g.name = m.name "
        "JOIN request_approvers a ON a.group_owner = m.owner_id AND a.group_name = m.name "
        "JOIN jobs j ON j.job_id = a.job_id AND j.pending_request_id = a.request_id AND j.status = 'suspended' "
        "WHERE m.user_id = ? AND NOT (j.user_id = ? AND j.pending_names = 0) "
        "AND (j.user_id = ? OR j.user_id NOT IN (SELECT muted_id FROM user_mutes WHERE user_id = ?)){f}"
    )
    # a user's suspended jobs whose current request names someone else (a group, another user)
    waiting_on_others = (
        "SELECT DISTINCT j.job_id FROM jobs j JOIN request_approvers a ON a.job_id = j.job_id "
        "AND a.request_id = j.pending_request_id WHERE j.user_id = ? AND j.status = 'suspended' "
        "AND (a.group_owner IS NOT NULL OR (a.user_id IS NOT NULL AND a.user_id <> j.user_id)) LIMIT ?"
    )
    # append_event_if_waiting: the job still waits for that request (locks its row, as a claim does)
    # (each lock returns the run's last receipt, kept on the row: migration 17)
    lock_waiting = (
        "UPDATE jobs SET updated_at = updated_at WHERE job_id = ? AND status = 'suspended' AND pending_request_id = ? "
        "RETURNING receipt_seq, receipt_sha256"
    )
    # record_decision: the job still runs under that claim (locks its row, as a stop's end does)
    lock_claimed = (
        "UPDATE jobs SET updated_at = updated_at WHERE job_id = ? AND status = 'in_progress' AND claim_token = ? "
        "RETURNING receipt_seq, receipt_sha256"
    )
    # a receipt written without either lock (a standing approval's use): the job row locked first
    lock_receipt = "UPDATE jobs SET updated_at = updated_at WHERE job_id = ? RETURNING receipt_seq, receipt_sha256"
    # the run's last receipt now the one just written
    set_receipt = "UPDATE jobs SET receipt_seq = ?, receipt_sha256 = ? WHERE job_id = ?"

    # webhooks: the secret's ciphertext is read by get_webhook and webhooks_for only
    insert_webhook = (
        "INSERT INTO webhooks (id, owner_id, url, events, secret_ciphertext, created_at) VALUES (?, ?, ?, ?, ?, ?) "
        "RETURNING id, owner_id, url, events, created_at"
    )
    # a user's webhooks are counted with the user's row locked (a no-op UPDATE): two creations at
    # once cannot both pass the limit
    lock_user = "UPDATE users SET name = name WHERE id = ?"
    count_webhooks = "SELECT COUNT(*) AS n FROM webhooks WHERE owner_id = ?"
    list_webhooks = "SELECT id, owner_id, url, events, created_at FROM webhooks WHERE owner_id = ? ORDER BY created_at, id"
    webhook = "SELECT * FROM webhooks WHERE id = ?"
    webhooks_of_owners = "SELECT * FROM webhooks WHERE owner_id IN ({owners}) ORDER BY created_at, id"
    delete_webhook = "DELETE FROM webhooks WHERE id = ? AND owner_id = ?"
    delete_webhook_deliveries = "DELETE FROM webhook_deliveries WHERE webhook_id = ?"
    insert_delivery = (
        "INSERT INTO webhook_deliveries (id, webhook_id, event, job_id, seq, attempt, status_code, error, delivered, at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    list_deliveries = "SELECT * FROM webhook_deliveries WHERE webhook_id = ? ORDER BY pos DESC LIMIT ?"
    delivered_webhooks = (
        "SELECT DISTINCT webhook_id FROM webhook_deliveries WHERE job_id = ? AND seq = ? AND delivered = 1"
    )

    # standing approvals (engine/store/sql/standing.py)
    insert_standing = (
        "INSERT INTO standing_approvals (id, maker_id, flow_id, flow_owner_id, tool, scope, session_id, "
        "session_user_id, job_id, request_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING"
    )
    standing = "SELECT * FROM standing_approvals WHERE id = ?"
    list_standing = (
        "SELECT * FROM standing_approvals WHERE maker_id = ? OR flow_owner_id = ? "
        "ORDER BY created_at DESC, id DESC LIMIT ?"
    )
    count_standing = (
        "SELECT COUNT(*) AS n FROM standing_approvals WHERE maker_id = ? AND expires_at > ? AND revoked_at IS NULL"
    )
    find_standing = (
        "SELECT * FROM standing_approvals WHERE flow_id = ? AND tool = ? AND expires_at > ? AND revoked_at IS NULL "
        "AND (scope = 'flow' OR (scope = 'session' AND session_id = ? AND session_user_id = ?)) "
        "ORDER BY created_at DESC, id DESC LIMIT ?"
    )
    revoke_standing = "UPDATE standing_approvals SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
    use_standing = "UPDATE standing_approvals SET uses = uses + 1, last_used_at = ? WHERE id = ?"

    # contacts, decision links, notifications (engine/store/sql/channels.py)
    set_user_email = "UPDATE users SET email = ?, email_verified = ? WHERE id = ?"
    set_user_slack = "UPDATE users SET slack = ?, slack_verified = ? WHERE id = ?"
    slack_holder = "SELECT id, slack_verified FROM users WHERE slack = ? AND id <> ?"
    release_slack = "UPDATE users SET slack = NULL, slack_verified = 0 WHERE id = ? AND slack_verified = 0"
    verify_user_email = "UPDATE users SET email_verified = 1 WHERE id = ? AND email = ?"
    verify_user_slack = "UPDATE users SET slack_verified = 1 WHERE id = ? AND slack = ?"
    insert_contact_token = (
        "INSERT INTO contact_tokens (token_hash, user_id, channel, address, csrf, created_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    contact_tokens_of_user = "SELECT COUNT(*) AS n FROM contact_tokens WHERE user_id = ? AND created_at > ?"
    contact_tokens_to_address = "SELECT COUNT(*) AS n FROM contact_tokens WHERE address = ? AND created_at > ?"
    contact_token = "SELECT * FROM contact_tokens WHERE token_hash = ?"
    last_contact_token = (
        "SELECT * FROM contact_tokens WHERE user_id = ? AND channel = ? ORDER BY created_at DESC, token_hash LIMIT 1"
    )
    use_contact_token = (
        "UPDATE contact_tokens SET used_at = ? WHERE token_hash = ? AND used_at IS NULL AND expires_at > ? "
        "RETURNING *"
    )
    finish_contact_token = "UPDATE contact_tokens SET attempts = ?, delivered = ?, error = ? WHERE token_hash = ?"
    delete_user_contact_tokens = "DELETE FROM contact_tokens WHERE user_id = ?"
    delete_expired_contact_tokens = "DELETE FROM contact_tokens WHERE expires_at <= ?"
    user_by_slack = "SELECT * FROM users WHERE slack = ?"
    insert_link = (
        "INSERT INTO decision_links (token_hash, job_id, request_id, user_id, channel, csrf, created_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    link = "SELECT * FROM decision_links WHERE token_hash = ?"
    use_link = (
        "UPDATE decision_links SET used_at = ? WHERE token_hash = ? AND used_at IS NULL AND expires_at > ? "
        "RETURNING token_hash"
    )
    unuse_link = "UPDATE decision_links SET used_at = NULL WHERE token_hash = ? AND used_at = ?"
    delete_user_links = "DELETE FROM decision_links WHERE user_id = ?"
    delete_job_links = "DELETE FROM decision_links WHERE job_id = ?"
    delete_expired_links = "DELETE FROM decision_links WHERE expires_at <= ?"
    insert_notification = (
        "INSERT INTO notifications (id, job_id, request_id, seq, event, channel, user_id, attempt, delivered, error, "
        "ref, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *"
    )
    list_notifications = "SELECT * FROM notifications WHERE job_id = ? ORDER BY pos DESC LIMIT ?"
    # a (job, request, seq, channel, user) is held by a delivered row or an unfinished claim
    notification_holder = (
        "SELECT * FROM notifications WHERE job_id = ? AND request_id = ? AND seq = ? AND channel = ? "
        "AND user_id = ? AND (delivered = 1 OR error IS NULL) ORDER BY pos LIMIT 1"
    )
    finish_notification = "UPDATE notifications SET delivered = ?, error = ?, ref = ? WHERE id = ?"
    delete_job_notifications = "DELETE FROM notifications WHERE job_id = ?"
    delete_user_notifications = "DELETE FROM notifications WHERE user_id = ?"

    # mutes: (user_id, muted_id) is the key
    insert_mute = (
        "INSERT INTO user_mutes (user_id, muted_id, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING "
        "RETURNING user_id"
    )
    delete_mute = "DELETE FROM user_mutes WHERE user_id = ? AND muted_id = ?"
    list_mutes = "SELECT muted_id FROM user_mutes WHERE user_id = ? ORDER BY created_at, muted_id"
    muters_of = "SELECT user_id FROM user_mutes WHERE muted_id = ? AND user_id IN ({users})"

    # secrets: the ciphertext is read by get_secret only; list_secrets never selects it
    upsert_secret = (
        "INSERT INTO secrets (owner_id, name, ciphertext, created_at, updated_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (owner_id, name) DO UPDATE SET ciphertext = excluded.ciphertext, "
        "updated_at = excluded.updated_at RETURNING *"
    )
    insert_secret = (
        "INSERT INTO secrets (owner_id, name, ciphertext, created_at, updated_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING"
    )
    secret = "SELECT * FROM secrets WHERE owner_id = ? AND name = ?"
    list_secrets = "SELECT owner_id, name, created_at, updated_at FROM secrets WHERE owner_id = ?"
    delete_secret = "DELETE FROM secrets WHERE owner_id = ? AND name = ?"

    upsert_flow = (
        "INSERT INTO flows (id, owner_id, name, spec, version, created_at, updated_at) VALUES (?, ?, ?, ?, 1, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET name = excluded.name, spec = excluded.spec, "
        "version = flows.version + 1, updated_at = excluded.updated_at RETURNING *"
    )
    insert_flow_version = (
        "INSERT INTO flow_versions (flow_id, version, name, spec, created_at, size) VALUES (?, ?, ?, ?, ?, ?)"
    )
    flow_stored = "SELECT COALESCE(SUM(size), 0) AS n FROM flow_versions WHERE flow_id = ?"
    flow_by_id = "SELECT * FROM flows WHERE id = ?"
    flow_version = (
        "SELECT f.id, f.owner_id, v.name, v.spec, v.version, f.created_at, v.created_at AS updated_at "
        "FROM flows f JOIN flow_versions v ON v.flow_id = f.id WHERE f.id = ? AND v.version = ?"
    )
    list_flows = (
        "SELECT f.* FROM flows f WHERE f.owner_id = ? OR EXISTS (SELECT 1 FROM flow_shares s "
        "WHERE s.flow_id = f.id AND s.user_id = ?) ORDER BY f.created_at, f.id"
    )
    delete_flow = "DELETE FROM flows WHERE id = ? RETURNING owner_id"
    delete_flow_versions = "DELETE FROM flow_versions WHERE flow_id = ?"
    delete_flow_shares = "DELETE FROM flow_shares WHERE flow_id = ?"
    share = "SELECT actions FROM flow_shares WHERE flow_id = ? AND user_id = ?"
    upsert_share = (
        "INSERT INTO flow_shares (flow_id, user_id, actions, created_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (flow_id, user_id) DO UPDATE SET actions = excluded.actions"
    )
    delete_share = "DELETE FROM flow_shares WHERE flow_id = ? AND user_id = ?"
    list_shares = "SELECT user_id, actions FROM flow_shares WHERE flow_id = ? ORDER BY user_id LIMIT ?"
    flow_owner = "SELECT owner_id FROM flows WHERE id = ?"

    # a user's runs in flight (create_job's max_in_flight), counted with the user's row locked
    count_in_flight = "SELECT COUNT(*) AS n FROM jobs WHERE user_id = ? AND status IN ('queued', 'in_progress')"
    insert_job = (
        "INSERT INTO jobs (job_id, flow_id, flow_version, user_id, session_id, status, request, run_id, "
        "idempotency_key, created_at, updated_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING RETURNING *"
    )
    insert_leased_job = (
        "INSERT INTO jobs (job_id, flow_id, flow_version, user_id, session_id, status, request, run_id, "
        "idempotency_key, created_at, updated_at, finished_at, lease_until) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING *"
    )
    # inline runs: the lease, a stop request, the sweep of expired leases
    renew_lease = (
        "UPDATE jobs SET lease_until = ? WHERE job_id = ? AND status IN ('queued', 'in_progress') "
        "AND lease_until IS NOT NULL RETURNING cancel_requested_at"
    )
    lease_state = (
        "SELECT cancel_requested_at FROM jobs WHERE job_id = ? AND status IN ('queued', 'in_progress') "
        "AND lease_until IS NOT NULL"
    )
    request_cancel = (
        "UPDATE jobs SET cancel_requested_at = ? WHERE job_id = ? AND status IN ('queued', 'in_progress') "
        "AND lease_until IS NOT NULL"
    )
    expired_leases = (
        "SELECT job_id FROM jobs WHERE status IN ('queued', 'in_progress') AND lease_until IS NOT NULL "
        "AND lease_until < ? ORDER BY lease_until LIMIT ?"
    )
    fail_expired = (
        "UPDATE jobs SET status = 'failed', error = ?, updated_at = ?, finished_at = ?, pending = NULL, "
        "pending_request_id = NULL WHERE job_id = ? AND status IN ('queued', 'in_progress') "
        "AND lease_until IS NOT NULL AND lease_until < ?"
    )
    unstarted_jobs = (
        "SELECT * FROM jobs WHERE status = 'queued' AND lease_until IS NULL AND created_at < ? "
        "ORDER BY created_at LIMIT ?"
    )
    job_by_id = "SELECT * FROM jobs WHERE job_id = ?"
    # the job and its flow's latest version in one statement (a decision's check, issue 33)
    job_with_flow = (
        "SELECT j.*, f.id AS f_id, f.owner_id AS f_owner_id, f.name AS f_name, f.spec AS f_spec, "
        "f.version AS f_version, f.created_at AS f_created_at, f.updated_at AS f_updated_at "
        "FROM jobs j LEFT JOIN flows f ON f.id = j.flow_id WHERE j.job_id = ?"
    )
    job_by_idempotency = "SELECT * FROM jobs WHERE user_id = ? AND idempotency_key = ?"
    mark_suspended = (
        "UPDATE jobs SET status = 'suspended', pending = ?, pending_request_id = ?, claim_token = NULL, "
        "paused_at = ?, pending_kind = ?, pending_names = ?, "
        "updated_at = ? WHERE job_id = ? AND status IN ('queued', 'in_progress')"
    )
    claim_resume = (
        "UPDATE jobs SET status = 'in_progress', claim_token = ?, updated_at = ? "
        "WHERE job_id = ? AND status = 'suspended' AND pending_request_id = ?"
    )
    # record_decision's claim of a job carried from another read (issue 33): only while its row is
    # as that read saw it (every change of a job's row sets updated_at)
    claim_resume_stamped = (
        "UPDATE jobs SET status = 'in_progress', claim_token = ?, updated_at = ? "
        "WHERE job_id = ? AND status = 'suspended' AND pending_request_id = ? AND updated_at = ?"
    )
    # the same claimant again (a retried activity): the claim it took is still the job's last
    # (running on, or ended since: a terminal status keeps the token; a new pause clears it)
    claim_held = "SELECT 1 AS held FROM jobs WHERE job_id = ? AND status NOT IN ('queued', 'suspended') AND claim_token = ?"
    # only while the request is still pending: a recorded decision cleared it (record_decision)
    rollback_resume = (
        "UPDATE jobs SET status = 'suspended', claim_token = NULL, updated_at = ? "
        "WHERE job_id = ? AND status = 'in_progress' AND claim_token = ? AND pending_request_id IS NOT NULL"
    )
    claim_cancel = (
        "UPDATE jobs SET status = 'cancelled', pending = NULL, pending_request_id = NULL, claim_token = NULL, "
        "updated_at = ?, finished_at = ? WHERE job_id = ? AND status = 'suspended'"
    )
    clear_pending = "UPDATE jobs SET pending = NULL, pending_request_id = NULL, updated_at = ? WHERE job_id = ?"
    # record_decision's, with the decision's receipt the run's last (one UPDATE for both)
    clear_pending_receipt = (
        "UPDATE jobs SET pending = NULL, pending_request_id = NULL, receipt_seq = ?, receipt_sha256 = ?, "
        "updated_at = ? WHERE job_id = ?"
    )
    find_suspended = (
        "SELECT * FROM jobs WHERE flow_id = ? AND user_id = ? AND status = 'suspended' "
        "AND COALESCE(session_id, flow_id) = ? ORDER BY created_at, job_id"
    )
    list_pending = "SELECT * FROM jobs WHERE user_id = ? AND status = 'suspended' AND pending IS NOT NULL"
    # jobs that are not over (jobs_flow_status, jobs_user_status)
    flow_active_jobs = (
        "SELECT * FROM jobs WHERE flow_id = ? AND status IN ('queued', 'in_progress', 'suspended') "
        "ORDER BY created_at, job_id"
    )
    count_jobs = "SELECT status, count(*) AS n FROM jobs GROUP BY status"
    want_release = "INSERT INTO workflow_releases (job_id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING"
    releases_due = "SELECT job_id FROM workflow_releases WHERE created_at < ? ORDER BY created_at, job_id LIMIT ?"
    released = "DELETE FROM workflow_releases WHERE job_id = ?"
    user_active_jobs = (
        "SELECT * FROM jobs WHERE user_id = ? AND status IN ('queued', 'in_progress', 'suspended') "
        "ORDER BY created_at, job_id"
    )

    next_seq = (
        "INSERT INTO job_event_seq (job_id, last_seq) VALUES (?, 1) ON CONFLICT (job_id) "
        "DO UPDATE SET last_seq = job_event_seq.last_seq + 1 RETURNING last_seq"
    )
    insert_event = (
        "INSERT INTO events (job_id, seq, event, data, created_at, dedupe_key, sha256, prev_sha256) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    event_sha = "SELECT sha256 FROM events WHERE job_id = ? AND seq = ?"
    last_event_seq = "SELECT last_seq FROM job_event_seq WHERE job_id = ?"
    event_by_dedupe = "SELECT seq FROM events WHERE job_id = ? AND dedupe_key = ?"
    # a decision's events under its claim token, by their exact keys (the unique index; no range
    # over text, whose order is the database's collation)
    decision_events = (
        "SELECT job_id, seq, event, data, created_at, dedupe_key, sha256, prev_sha256 FROM events "
        "WHERE job_id = ? AND dedupe_key IN (?, ?) ORDER BY seq"
    )
    read_events = (
        "SELECT job_id, seq, event, data, created_at, sha256, prev_sha256 FROM events "
        "WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?"
    )
    read_events_named = (
        "SELECT job_id, seq, event, data, created_at, sha256, prev_sha256 FROM events "
        "WHERE job_id = ? AND event = ? ORDER BY seq"
    )
    # the store's tail (Store.tail_events). SQLite: the events table's rowid follows commit order
    # (one writer at a time); PostgreSQL: a notification sent by the appending transaction,
    # delivered when it commits
    tail_top = "SELECT coalesce(max(rowid), 0) AS pos FROM events"
    tail_after = "SELECT rowid AS pos, job_id, seq, event FROM events WHERE rowid > ? ORDER BY rowid LIMIT ?"
    notify_event = "SELECT pg_notify('signoff_events', ?)"

    insert_checkpoint = (
        "INSERT INTO checkpoints (id, run_id, job_id, data, created_at, expires_at, size, charged_to) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    latest_checkpoint = "SELECT * FROM checkpoints WHERE run_id = ? ORDER BY pos DESC LIMIT 1"
    checkpoint_by_id = "SELECT * FROM checkpoints WHERE id = ?"
    delete_checkpoints = "DELETE FROM checkpoints WHERE run_id = ? RETURNING charged_to, size"
    # driven by the checkpoints (few: paused runs') with a key lookup each, not by the ended
    # jobs (every run ever), which SQLite would gather in full for an IN (SELECT ...) every sweep
    delete_checkpoints_of_ended_runs = (
        "DELETE FROM checkpoints WHERE EXISTS (SELECT 1 FROM jobs WHERE jobs.job_id = checkpoints.job_id "
        "AND jobs.status IN ('completed', 'failed', 'cancelled', 'timed_out')) RETURNING charged_to, size"
    )
    delete_expired_checkpoints = (
        "DELETE FROM checkpoints WHERE expires_at IS NOT NULL AND expires_at <= ? RETURNING charged_to, size"
    )

    insert_message = (
        "INSERT INTO messages (id, session_id, flow_id, job_id, sender, sender_name, text, kind, card, "
        "card_request_id, submitted_action, superseded, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (id) DO NOTHING RETURNING *"
    )
    message_by_id = "SELECT * FROM messages WHERE id = ?"
    list_messages = "SELECT * FROM messages WHERE session_id = ?"
    stamp_card = "UPDATE messages SET submitted_action = ? WHERE card_request_id = ? AND kind = 'card'"
    supersede_cards = (
        "UPDATE messages SET superseded = ? WHERE job_id = ? AND kind = 'card' "
        "AND submitted_action IS NULL AND superseded = 0"
    )

    upsert_span = (
        "INSERT INTO spans (trace_id, span_id, parent_id, name, type, start_time, end_time, status, inputs, "
        "outputs, attributes, run_id, flow_id, size, charged_to) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (trace_id, span_id) DO UPDATE SET parent_id = excluded.parent_id, name = excluded.name, "
        "type = excluded.type, start_time = excluded.start_time, end_time = excluded.end_time, "
        "status = excluded.status, inputs = excluded.inputs, outputs = excluded.outputs, "
        "attributes = excluded.attributes, run_id = excluded.run_id, flow_id = excluded.flow_id, "
        "size = excluded.size, charged_to = excluded.charged_to"
    )
    spans_stored = "SELECT charged_to, size FROM spans WHERE trace_id = ? AND span_id IN ({ids})"
    trace = "SELECT * FROM spans WHERE trace_id = ? ORDER BY start_time, span_id"
    list_traces = (
        "SELECT s.trace_id AS trace_id, MAX(s.run_id) AS run_id, MAX(s.flow_id) AS flow_id, "
        "MIN(s.start_time) AS start_time, MAX(s.end_time) AS end_time, "
        "SUM(CASE WHEN s.status = 'error' THEN 1 ELSE 0 END) AS errors, "
        "SUM(CASE WHEN s.end_time IS NULL THEN 1 ELSE 0 END) AS open_spans, "
        "(SELECT r.name FROM spans r WHERE r.trace_id = s.trace_id ORDER BY "
        "CASE WHEN r.parent_id IS NULL THEN 0 ELSE 1 END, r.start_time LIMIT 1) AS name, "
        "(SELECT r.status FROM spans r WHERE r.trace_id = s.trace_id ORDER BY "
        "CASE WHEN r.parent_id IS NULL THEN 0 ELSE 1 END, r.start_time LIMIT 1) AS root_status "
        "FROM spans s {where} GROUP BY s.trace_id {having} ORDER BY MIN(s.start_time) DESC, s.trace_id LIMIT ?"
    )
    # list_traces' filters, applied before its LIMIT
    traces_of_flow = "s.trace_id IN (SELECT f.trace_id FROM spans f WHERE f.flow_id = ?)"
    # the user's traces: those whose run (the spans' run_id, else the trace id) is the run of one
    # of the user's jobs. The WHERE part narrows the spans to the candidate traces (the trace id
    # or some span's run_id is the user's: jobs_user_status, then the trace or spans_run), the
    # HAVING part keeps exactly those whose run, as list_traces reports it, is the user's.
    traces_of_user_candidates = (
        "s.trace_id IN (SELECT j.run_id FROM jobs j WHERE j.user_id = ? UNION "
        "SELECT u.trace_id FROM spans u JOIN jobs j ON j.run_id = u.run_id WHERE j.user_id = ?)"
    )
    traces_of_user = "COALESCE(MAX(s.run_id), s.trace_id) IN (SELECT j.run_id FROM jobs j WHERE j.user_id = ?)"

    put_blob = (
        "INSERT INTO blobs (key, data, created_at, size, charged_to) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET data = excluded.data, created_at = excluded.created_at, "
        "size = excluded.size, charged_to = excluded.charged_to"
    )
    blob_stored = "SELECT charged_to, size FROM blobs WHERE key = ?"
    get_blob = "SELECT data FROM blobs WHERE key = ?"
    delete_blobs = "DELETE FROM blobs WHERE substr(key, 1, ?) = ? RETURNING charged_to, size"

    # deleting an ended run (retention.py): the job's row first, only when it ended and its
    # workflow is let go of (one statement: a claim racing it finds it gone or finds it kept),
    # then what hangs on its id. Each row comes back with what it counted (Store.stored_bytes):
    # {octets} and {octet_text} are the dialect's (schema.py), filled in per store
    delete_ended_job = (
        "DELETE FROM jobs WHERE job_id = ? AND status IN ('completed', 'failed', 'cancelled', 'timed_out') "
        "AND NOT EXISTS (SELECT 1 FROM workflow_releases r WHERE r.job_id = jobs.job_id) "
        "RETURNING user_id, {octets}(CAST(request AS {octet_text})) "
        "+ COALESCE({octets}(CAST(result AS {octet_text})), 0) + COALESCE({octets}(CAST(error AS {octet_text})), 0) AS size"
    )
    delete_job_seq = "DELETE FROM job_event_seq WHERE job_id = ?"
    delete_job_events = "DELETE FROM events WHERE job_id = ? RETURNING {octets}(CAST(data AS {octet_text})) AS size"
    delete_job_messages = (
        "DELETE FROM messages WHERE job_id = ? RETURNING {octets}(CAST(text AS {octet_text})) "
        "+ COALESCE({octets}(CAST(card AS {octet_text})), 0) AS size"
    )
    delete_run_checkpoints = "DELETE FROM checkpoints WHERE run_id = ? OR job_id = ? RETURNING charged_to, size"  # both indexed
    delete_run_spans = "DELETE FROM spans WHERE trace_id = ? OR run_id = ? RETURNING charged_to, size"
    delete_job_participants = "DELETE FROM job_participants WHERE job_id = ?"
    # retention: the runs that ended longest ago, a range of the end time's index (jobs_finished).
    # finished_at is set exactly when a job ends (a terminal status never changes), so no status
    # condition here: with one, SQLite reads every ended job by (status, created_at) and sorts
    # them. delete_ended_job checks the status again
    ended_before = (
        "SELECT job_id FROM jobs WHERE finished_at < ? "
        "AND NOT EXISTS (SELECT 1 FROM workflow_releases r WHERE r.job_id = jobs.job_id) "
        "ORDER BY finished_at, job_id LIMIT ?"
    )

    # stored bytes per user (Store.stored_bytes): a few rows per user (shards, core.py), changed in
    # the transaction of each write they count
    charge_user = (
        "INSERT INTO user_storage (user_id, shard, bytes) VALUES (?, ?, CAST(? AS BIGINT)) "
        "ON CONFLICT (user_id, shard) DO UPDATE SET bytes = user_storage.bytes + excluded.bytes"
    )
    charge_job = (
        "INSERT INTO user_storage (user_id, shard, bytes) SELECT user_id, ?, CAST(? AS BIGINT) FROM jobs "
        "WHERE job_id = ? ON CONFLICT (user_id, shard) DO UPDATE SET bytes = user_storage.bytes + excluded.bytes"
    )
    job_user = "SELECT user_id FROM jobs WHERE job_id = ?"
    # a span or blob replaced: the job's row is locked first (a no-op UPDATE, as lock_job), so two
    # saves of one run's span or blob at once read each other's size, and neither counts it twice
    lock_job_user = "UPDATE jobs SET updated_at = updated_at WHERE job_id = ? RETURNING user_id"
    stored_bytes = "SELECT SUM(bytes) AS bytes FROM user_storage WHERE user_id = ?"
    delete_user_storage = "DELETE FROM user_storage WHERE user_id = ?"

    migrations_version = "SELECT MAX(version) AS version FROM signoff_migrations"
    record_migration = "INSERT INTO signoff_migrations (version, applied_at) VALUES (?, ?)"
    ping = "SELECT 1 AS one"

    # receipts (DESIGN §16): a run's receipts in chain order (seq 1, 2, ...), written with the
    # decision's records under the job row's lock (record_decision, append_event_if_waiting)
    insert_receipt = (
        "INSERT INTO receipts (job_id, seq, receipt_id, flow_id, at, sha256, body) VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    read_receipts = "SELECT * FROM receipts WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?"
    delete_job_receipts = "DELETE FROM receipts WHERE job_id = ?"
