-- Store the worker :id as it describes itself now (replacing what it said before), seen_at
-- now(); started_at is now() at its first heartbeat and kept afterwards.
INSERT INTO {schema}.worker AS w (
    id, host, pid, version, queues, concurrency, held, state, heartbeat, extra, started_at,
    seen_at
)
VALUES (
    :id, :host, :pid, :version, :queues::text[], :concurrency, :held, :state, :heartbeat,
    :extra::json, now(), now()
)
ON CONFLICT (id) DO UPDATE
SET host = EXCLUDED.host,
    pid = EXCLUDED.pid,
    version = EXCLUDED.version,
    queues = EXCLUDED.queues,
    concurrency = EXCLUDED.concurrency,
    held = EXCLUDED.held,
    state = EXCLUDED.state,
    heartbeat = EXCLUDED.heartbeat,
    extra = EXCLUDED.extra,
    seen_at = EXCLUDED.seen_at
RETURNING w.started_at, w.seen_at
