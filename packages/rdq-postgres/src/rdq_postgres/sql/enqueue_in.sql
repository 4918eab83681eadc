-- Admit tasks inside the caller's own transaction (enqueue_in): the arrays and :delay_us of
-- enqueue_batch.sql, and :notify (whether to NOTIFY). Never raises for an id held by another
-- queue, so the caller's transaction stays usable: `conflict_id`/`conflict_queue` name the
-- first such id in batch order (the store then deletes what this statement inserted and
-- raises IDConflict). The NOTIFY is delivered when the caller commits, and never on rollback.
WITH input AS (
    SELECT *
    FROM unnest(
        :ids::text[], :queues::text[], :handler_refs::text[], :payloads::json[],
        :headers::json[], :attempt_counts::integer[], :redrive_counts::integer[],
        :attempts::json[], :error_types::text[], :next_attempt_ats::timestamptz[],
        :retries::json[], :format_versions::integer[], :extras::json[], :priorities::smallint[],
        :keys::text[]
    ) WITH ORDINALITY AS i(
        id, queue, handler_ref, payload, headers, attempt_count, redrive_count, attempts,
        error_type, next_attempt_at, retry, format_version, extra, priority, keys, n
    )
),
ins AS (
    INSERT INTO {schema}.task (
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, error_type, created_at, next_attempt_at, retry, format_version, extra,
        priority, keys
    )
    SELECT i.id, i.queue, i.handler_ref, i.payload, i.headers, 'PENDING', i.attempt_count,
           i.redrive_count, i.attempts, i.error_type, now(),
           COALESCE(i.next_attempt_at, now() + :delay_us::bigint * interval '1 microsecond'),
           i.retry, i.format_version, i.extra, i.priority, string_to_array(i.keys, chr(31))
    FROM input AS i
    ORDER BY i.n
    ON CONFLICT (id) DO NOTHING
    RETURNING id, queue, due_at
),
{admission_floor}
conflict AS (
    -- task_queue() reads with a snapshot of its own: an id that another transaction committed
    -- while the INSERT waited on it is invisible to this statement's snapshot
    SELECT s.id, s.held_by AS queue
    FROM (
        SELECT i.id, i.queue, i.n, {schema}.task_queue(i.id) AS held_by
        FROM input AS i
        WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.id = i.id)
        OFFSET 0
    ) AS s
    WHERE s.held_by <> s.queue
    ORDER BY s.n
    LIMIT 1
)
SELECT ARRAY(SELECT id FROM ins) AS stored,
       (SELECT id FROM conflict) AS conflict_id,
       (SELECT queue FROM conflict) AS conflict_queue,
       (SELECT count(pg_notify('{channel}', queue))
        FROM (SELECT DISTINCT queue FROM ins) AS q
        WHERE :notify::boolean AND NOT EXISTS (SELECT 1 FROM conflict)) AS notified,
       (SELECT count(*) FROM lowered) AS floors
