SELECT queue, minute, succeeded, failed, dead, deferred FROM counts
WHERE minute >= :since
ORDER BY queue, minute
