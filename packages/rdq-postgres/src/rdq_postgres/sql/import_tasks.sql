-- Store tasks exactly as given (status, counters, history and every timestamp; no token, so
-- an IN_FLIGHT task is reclaimed once its lease_expires_at passes). Ids already in the same
-- queue are left alone and listed in `present`; an id in another queue raises RQ409
-- (id_conflict), so nothing is stored.
WITH input AS (
    SELECT *
    FROM unnest(
        $1::text[], $2::text[], $3::text[], $4::json[], $5::json[], $6::text[],
        $7::integer[], $8::integer[], $9::json[], $10::text[], $11::timestamptz[],
        $12::timestamptz[], $13::timestamptz[], $14::timestamptz[], $15::timestamptz[],
        $16::timestamptz[], $17::json[], $18::smallint[], $19::text[], $20::timestamptz[],
        $21::integer[], $22::json[]
    ) WITH ORDINALITY AS i(
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, error_type, created_at, next_attempt_at, lease_expires_at, completed_at,
        dead_lettered_at, cancelled_at, retry, priority, claimed_by, claimed_at,
        format_version, extra, n
    )
),
ins AS (
    INSERT INTO {schema}.task (
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, error_type, created_at, next_attempt_at, lease_expires_at, completed_at,
        dead_lettered_at, cancelled_at, retry, priority, claimed_by, claimed_at,
        format_version, extra
    )
    SELECT i.id, i.queue, i.handler_ref, i.payload, i.headers, i.status, i.attempt_count,
           i.redrive_count, i.attempts, i.error_type, i.created_at, i.next_attempt_at,
           i.lease_expires_at, i.completed_at, i.dead_lettered_at, i.cancelled_at, i.retry,
           i.priority, i.claimed_by, i.claimed_at,
           i.format_version, i.extra
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
