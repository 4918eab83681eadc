-- A task exactly as another store held it; no claim token, so an IN_FLIGHT task is reclaimed
-- once its lease_expires_at passes.
INSERT INTO task (
    id, queue, handler_ref, status, priority, payload, headers, attempt_count, redrive_count,
    attempts, last_error_type, created_at, next_attempt_at, lease_expires_at, claimed_by,
    claimed_at, completed_at, dead_lettered_at, cancelled_at, retry, format_version, extra, keys
) VALUES (
    :id, :queue, :handler_ref, :status, :priority, :payload, :headers, :attempt_count,
    :redrive_count, :attempts, :last_error_type, :created_at, :next_attempt_at,
    :lease_expires_at, :claimed_by, :claimed_at, :completed_at, :dead_lettered_at,
    :cancelled_at, :retry, :format_version, :extra, :keys
)
