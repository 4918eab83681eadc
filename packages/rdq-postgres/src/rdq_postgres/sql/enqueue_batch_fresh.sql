-- Admit many new tasks in one statement: no attempts, counters at 0, no retry override, no
-- unknown fields, format version :format_version and due at now() + :delay_us microseconds.
-- Same result and conflict handling as enqueue_batch.sql, which takes every field. When every
-- task has the same queue, handler_ref, priority or keys, that array (:queues, :handler_refs,
-- :priorities, :keys) holds just it; when no task has headers, :headers is empty. :keys holds
-- each task's keys joined by U+001F ('' for none).
WITH input AS (
    SELECT i.id, COALESCE(i.queue, (:queues::text[])[1]) AS queue,
           COALESCE(i.handler_ref, (:handler_refs::text[])[1]) AS handler_ref, i.payload,
           COALESCE(i.headers, '{}') AS headers,
           COALESCE(i.priority, (:priorities::smallint[])[1]) AS priority,
           COALESCE(i.keys, (:keys::text[])[1]) AS keys, i.n
    FROM unnest(
        :ids::text[], :queues::text[], :handler_refs::text[], :payloads::json[],
        :headers::json[], :priorities::smallint[], :keys::text[]
    ) WITH ORDINALITY AS i(id, queue, handler_ref, payload, headers, priority, keys, n)
),
ins AS (
    INSERT INTO {schema}.task (
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, created_at, next_attempt_at, format_version, extra, priority, keys
    )
    SELECT i.id, i.queue, i.handler_ref, i.payload, i.headers, 'PENDING', 0, 0, '[]', now(),
           now() + :delay_us::bigint * interval '1 microsecond', :format_version::integer, '{}',
           i.priority, string_to_array(i.keys, chr(31))
    FROM input AS i
    ORDER BY i.n
    ON CONFLICT (id) DO NOTHING
    RETURNING id, queue, due_at
),
{admission_floor}
{admission_result}
