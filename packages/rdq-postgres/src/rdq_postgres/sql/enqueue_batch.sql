-- Admit many tasks in one statement. Nothing is inserted if any id exists in another queue
-- (conflict_id/conflict_queue name it); ids already in the same queue are left alone.
WITH input AS (
    SELECT *
    FROM unnest(
        $1::text[], $2::text[], $3::text[], $4::json[], $5::json[], $6::integer[],
        $7::integer[], $8::json[], $9::text[], $10::timestamptz[], $11::json[],
        $12::integer[], $13::json[]
    ) WITH ORDINALITY AS i(
        id, queue, handler_ref, payload, headers, attempt_count, redrive_count, attempts,
        error_type, next_attempt_at, retry, format_version, extra, n
    )
),
conflict AS (
    SELECT i.id, t.queue
    FROM input AS i
    JOIN {schema}.task AS t ON t.id = i.id AND t.queue <> i.queue
    LIMIT 1
),
ins AS (
    INSERT INTO {schema}.task (
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, error_type, created_at, next_attempt_at, retry, format_version, extra
    )
    SELECT i.id, i.queue, i.handler_ref, i.payload, i.headers, 'PENDING', i.attempt_count,
           i.redrive_count, i.attempts, i.error_type, now(),
           COALESCE(i.next_attempt_at, now() + $14::interval), i.retry, i.format_version,
           i.extra
    FROM input AS i
    WHERE NOT EXISTS (SELECT 1 FROM conflict)
    ORDER BY i.n
    ON CONFLICT (id) DO NOTHING
    RETURNING id, queue
)
SELECT (SELECT array_agg(id) FROM ins) AS stored,
       (SELECT array_agg(DISTINCT queue) FROM ins) AS queues,
       (SELECT id FROM conflict) AS conflict_id,
       (SELECT queue FROM conflict) AS conflict_queue
