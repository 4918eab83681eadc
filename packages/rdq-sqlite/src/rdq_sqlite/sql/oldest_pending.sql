-- The earliest due time of a PENDING task of the queue: one index seek.
SELECT min(status_at) FROM task WHERE queue = :queue AND status = 'PENDING'
