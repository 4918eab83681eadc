SELECT handler_ref, last_error_type, count(*), min(status_at), max(status_at) FROM task
WHERE queue = :queue AND status = 'DEAD'
GROUP BY handler_ref, last_error_type
