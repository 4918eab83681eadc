-- Admit many tasks in one statement (item k is element k of every array; :keys holds each
-- task's keys joined by U+001F, '' for none; any field values:
-- enqueue_batch_fresh.sql is the lighter form for new tasks). Ids already in the same queue are
-- left alone and listed in `present`; an id in another queue raises RQ409 (see
-- admission_result.part).
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
{admission_result}
