-- A worker's registration replaced, seen now; started_at kept from its first heartbeat.
INSERT INTO worker (
    id, host, pid, version, queues, concurrency, held, state, heartbeat, started_at, seen_at,
    extra
) VALUES (
    :id, :host, :pid, :version, :queues, :concurrency, :held, :state, :heartbeat, :now, :now,
    :extra
)
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host,
    pid = excluded.pid,
    version = excluded.version,
    queues = excluded.queues,
    concurrency = excluded.concurrency,
    held = excluded.held,
    state = excluded.state,
    heartbeat = excluded.heartbeat,
    seen_at = excluded.seen_at,
    extra = excluded.extra
RETURNING started_at, seen_at
