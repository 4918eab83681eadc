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
)
SELECT ARRAY(
           SELECT i.id FROM input AS i
           WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.id = i.id)
           ORDER BY i.n
       ) AS present,
       (
           SELECT {schema}.id_conflict(i.id, t.queue)
           FROM input AS i
           CROSS JOIN LATERAL (
               SELECT t.queue FROM {schema}.task AS t WHERE t.id = i.id LIMIT 1
           ) AS t
           WHERE t.queue <> i.queue AND NOT EXISTS (SELECT 1 FROM ins WHERE ins.id = i.id)
           ORDER BY i.n
           LIMIT 1
       ) AS conflict
