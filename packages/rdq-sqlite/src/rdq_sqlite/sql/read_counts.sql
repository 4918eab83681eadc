SELECT queue, minute, succeeded, failed, dead, deferred FROM counts
WHERE queue = :queue AND minute >= :since
ORDER BY minute
