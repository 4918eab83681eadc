-- Admit many tasks in one statement (item k is element k of every array). Ids already in the
-- same queue are left alone and listed in `present`; an id in another queue raises RQ409
-- (id_conflict, migration 0002), which rolls the whole statement back.
WITH input AS (
    SELECT *
    FROM unnest(
        :ids::text[], :queues::text[], :handler_refs::text[], :payloads::text[]::json[],
        :headers::text[]::json[], :attempt_counts::integer[], :redrive_counts::integer[],
        :attempts::text[]::json[], :error_types::text[], :next_attempt_ats::text[]::timestamptz[],
        :retries::text[]::json[], :format_versions::integer[], :extras::text[]::json[],
        :priorities::integer[]
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
           COALESCE(i.next_attempt_at, now() + :delay_us * interval '1 microsecond'), i.retry,
           i.format_version, i.extra, i.priority
    FROM input AS i
    ORDER BY i.n
    ON CONFLICT (id) DO NOTHING
    RETURNING id
),
-- the ids the INSERT skipped: already stored, by this queue or another
skipped AS MATERIALIZED (
    SELECT i.id, i.queue, i.n
    FROM input AS i
    WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.id = i.id)
)
SELECT ARRAY(SELECT s.id FROM skipped AS s ORDER BY s.n) AS present,
       (
           -- task_queue() (migration 0004) reads with a snapshot of its own: an id that
           -- another transaction committed while the INSERT waited on it is invisible to this
           -- statement's snapshot (OFFSET 0: one call per skipped id)
           SELECT {schema}.id_conflict(s.id, s.held_by)
           FROM (
               SELECT s.id, s.queue, s.n, {schema}.task_queue(s.id) AS held_by
               FROM skipped AS s
               OFFSET 0
           ) AS s
           WHERE s.held_by <> s.queue
           ORDER BY s.n
           LIMIT 1
       ) AS conflict
