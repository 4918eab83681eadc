-- Store tasks exactly as given (item k is element k of every array): status, counters,
-- history and every timestamp; no token, so an IN_FLIGHT task is reclaimed once its
-- lease_expires_at passes. Ids already in the same queue are left alone and listed in
-- `present`; an id in another queue raises RQ409 (id_conflict), so nothing is stored.
WITH input AS (
    SELECT *
    FROM unnest(
        :ids::text[], :queues::text[], :handler_refs::text[], :payloads::text[]::json[],
        :headers::text[]::json[], :statuses::text[], :attempt_counts::integer[],
        :redrive_counts::integer[], :attempts::text[]::json[], :error_types::text[],
        :created_ats::text[]::timestamptz[], :next_attempt_ats::text[]::timestamptz[],
        :lease_expires_ats::text[]::timestamptz[], :completed_ats::text[]::timestamptz[],
        :dead_lettered_ats::text[]::timestamptz[], :cancelled_ats::text[]::timestamptz[],
        :retries::text[]::json[], :priorities::integer[], :claimed_bys::text[],
        :claimed_ats::text[]::timestamptz[], :format_versions::integer[],
        :extras::text[]::json[]
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
           i.priority, i.claimed_by, i.claimed_at, i.format_version, i.extra
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
