-- One chunk of the finished-task TTL: SUCCEEDED and CANCELLED tasks finished before :before.
DELETE FROM task WHERE id IN (
    SELECT id FROM task
    WHERE queue = :queue AND status IN ('SUCCEEDED', 'CANCELLED') AND status_at < :before
    LIMIT :chunk
)
