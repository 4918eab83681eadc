-- Add to the counts of each (queue, minute) (item k is element k of every array; an entry
-- given twice adds up): one upsert of increments, so concurrent additions lose none. Rows are
-- written in (queue, minute) order, so two additions never wait on each other crosswise.
INSERT INTO {schema}.counts AS c (queue, minute, succeeded, failed, dead, deferred)
SELECT i.queue, i.minute, sum(i.succeeded), sum(i.failed), sum(i.dead), sum(i.deferred)
FROM unnest(
    :queues::text[], :minutes::timestamptz[], :succeeded::bigint[], :failed::bigint[],
    :dead::bigint[], :deferred::bigint[]
) AS i(queue, minute, succeeded, failed, dead, deferred)
GROUP BY i.queue, i.minute
ORDER BY i.queue, i.minute
ON CONFLICT (queue, minute) DO UPDATE
SET succeeded = c.succeeded + EXCLUDED.succeeded,
    failed = c.failed + EXCLUDED.failed,
    dead = c.dead + EXCLUDED.dead,
    deferred = c.deferred + EXCLUDED.deferred
