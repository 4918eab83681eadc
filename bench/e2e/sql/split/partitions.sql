-- The partitions of split.succeeded that hold tasks of :queue (the ones its TTL purge drops).
SELECT DISTINCT s.tableoid::regclass::text AS partition
FROM split.succeeded AS s
WHERE s.queue = :queue
ORDER BY 1
