-- Admit many new tasks in one statement: no attempts, counters at 0, no retry override, no
-- unknown fields, the current format version ($6) and due at now() + $7 microseconds. Same
-- result and conflict handling as enqueue_batch.sql, which takes every field. When every task
-- has the same queue ($2), handler_ref ($3) or priority ($8), that array holds just it; when
-- no task has headers, $5 is empty.
WITH input AS (
    SELECT i.id, COALESCE(i.queue, $2[1]) AS queue,
           COALESCE(i.handler_ref, $3[1]) AS handler_ref, i.payload,
           COALESCE(i.headers, '{}') AS headers, COALESCE(i.priority, $8[1]) AS priority, i.n
    FROM unnest($1::text[], $2::text[], $3::text[], $4::json[], $5::json[], $8::smallint[])
        WITH ORDINALITY AS i(id, queue, handler_ref, payload, headers, priority, n)
),
ins AS (
    INSERT INTO {schema}.task (
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, created_at, next_attempt_at, format_version, extra, priority
    )
    SELECT i.id, i.queue, i.handler_ref, i.payload, i.headers, 'PENDING', 0, 0, '[]', now(),
           now() + $7::bigint * interval '1 microsecond', $6::integer, '{}', i.priority
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
