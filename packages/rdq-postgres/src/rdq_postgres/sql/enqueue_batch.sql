-- Admit many tasks in one statement (any field values; enqueue_batch_fresh.sql is the lighter
-- form for new tasks). Ids already in the same queue are left alone and listed in `present`;
-- an id in another queue raises RQ409 (id_conflict), so nothing of the batch is stored.
-- Only the ids the INSERT skipped are looked up, and only when it skipped any.
WITH input AS (
    SELECT *
    FROM unnest(
        $1::text[], $2::text[], $3::text[], $4::json[], $5::json[], $6::integer[],
        $7::integer[], $8::json[], $9::text[], $10::timestamptz[], $11::json[],
        $12::integer[], $13::json[], $14::smallint[]
    ) WITH ORDINALITY AS i(
        id, queue, handler_ref, payload, headers, attempt_count, redrive_count, attempts,
        error_type, next_attempt_at, retry, format_version, extra, priority, n
    )
),
ins AS (
    INSERT INTO {schema}.task (
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, error_type, created_at, next_attempt_at, retry, format_version, extra,
        priority
    )
    SELECT i.id, i.queue, i.handler_ref, i.payload, i.headers, 'PENDING', i.attempt_count,
           i.redrive_count, i.attempts, i.error_type, now(),
           COALESCE(i.next_attempt_at, now() + $15::bigint * interval '1 microsecond'), i.retry,
           i.format_version, i.extra, i.priority
    FROM input AS i
    ORDER BY i.n
    ON CONFLICT (id) DO NOTHING
    RETURNING id
),
counted AS (
    SELECT count(*) AS stored FROM ins
),
-- the ids the INSERT skipped: already stored, by this queue or another
skipped AS MATERIALIZED (
    SELECT i.id, i.queue, i.n
    FROM input AS i
    WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.id = i.id)
)
SELECT CASE WHEN c.stored < cardinality($1::text[]) THEN ARRAY(
           SELECT s.id FROM skipped AS s ORDER BY s.n
       ) END AS present,
       CASE WHEN c.stored < cardinality($1::text[]) THEN (
           -- task_queue() reads with a snapshot of its own: an id that another transaction
           -- committed while the INSERT waited on it is invisible to this statement's
           -- snapshot (OFFSET 0: one call per skipped id)
           SELECT {schema}.id_conflict(s.id, s.held_by)
           FROM (
               SELECT s.id, s.queue, s.n, {schema}.task_queue(s.id) AS held_by
               FROM skipped AS s
               OFFSET 0
           ) AS s
           WHERE s.held_by <> s.queue
           ORDER BY s.n
           LIMIT 1
       ) END AS conflict
FROM counted AS c
