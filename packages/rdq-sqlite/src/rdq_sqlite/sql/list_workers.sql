SELECT id, host, pid, version, queues, concurrency, held, state, heartbeat, started_at, seen_at,
    extra
FROM worker
ORDER BY id
