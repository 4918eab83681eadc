-- Every registered worker, by id.
SELECT id, host, pid, version, queues, concurrency, held, state, heartbeat, extra, started_at,
       seen_at
FROM {schema}.worker
ORDER BY id
