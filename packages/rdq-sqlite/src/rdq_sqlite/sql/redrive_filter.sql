UPDATE task SET
    status = 'PENDING',
    attempt_count = 0,
    redrive_count = redrive_count + 1,
    next_attempt_at = :now,
    dead_lettered_at = NULL,
    held = NULL
WHERE queue = :queue AND status = 'DEAD' AND {filter}
