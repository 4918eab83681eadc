-- The counts of :queue (every queue when NULL) of the minutes from :since on, by queue then
-- minute.
SELECT queue, minute, succeeded, failed, dead, deferred
FROM {schema}.counts
WHERE (:queue::text IS NULL OR queue = :queue::text) AND minute >= :since
ORDER BY queue, minute
