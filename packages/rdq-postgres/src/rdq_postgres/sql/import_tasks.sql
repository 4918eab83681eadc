-- Store tasks exactly as given (item k is element k of every array): status, counters, history
-- and every timestamp (:keys: each task's keys joined by U+001F, '' for none); no token, so an
-- IN_FLIGHT task is reclaimed once its lease_expires_at passes. Ids already in the same queue
-- are left alone and listed in `present`; an id in another queue raises RQ409 (see
-- admission_result.part), so nothing is stored.
WITH input AS (
    SELECT *
    FROM unnest(
        :ids::text[], :queues::text[], :handler_refs::text[], :payloads::json[],
        :headers::json[], :statuses::text[], :attempt_counts::integer[],
        :redrive_counts::integer[], :attempts::json[], :error_types::text[],
        :created_ats::timestamptz[], :next_attempt_ats::timestamptz[],
        :lease_expires_ats::timestamptz[], :completed_ats::timestamptz[],
        :dead_lettered_ats::timestamptz[], :cancelled_ats::timestamptz[], :retries::json[],
        :priorities::smallint[], :claimed_bys::text[], :claimed_ats::timestamptz[],
        :format_versions::integer[], :extras::json[], :keys::text[]
    ) WITH ORDINALITY AS i(
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, error_type, created_at, next_attempt_at, lease_expires_at, completed_at,
        dead_lettered_at, cancelled_at, retry, priority, claimed_by, claimed_at,
        format_version, extra, keys, n
    )
),
inserted AS (
    INSERT INTO {schema}.task (
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, error_type, created_at, next_attempt_at, lease_expires_at, completed_at,
        dead_lettered_at, cancelled_at, retry, priority, claimed_by, claimed_at,
        format_version, extra, keys
    )
    SELECT i.id, i.queue, i.handler_ref, i.payload, i.headers, i.status, i.attempt_count,
           i.redrive_count, i.attempts, i.error_type, i.created_at, i.next_attempt_at,
           i.lease_expires_at, i.completed_at, i.dead_lettered_at, i.cancelled_at, i.retry,
           i.priority, i.claimed_by, i.claimed_at, i.format_version, i.extra,
           string_to_array(i.keys, chr(31))
    FROM input AS i
    ORDER BY i.n
    ON CONFLICT (id) DO NOTHING
    RETURNING id, queue, due_at, status
),
-- an IN_FLIGHT task's lease lowers its queue's lease floor where it ends before it (migration
-- 0017); `ins` reads this CTE so that it runs
leases_lowered AS MATERIALIZED (
    SELECT {schema}.lower_lease_floor(s.queue, min(s.due_at)) AS lowered
    FROM inserted AS s
    WHERE s.status = 'IN_FLIGHT' AND s.due_at > now()
    GROUP BY s.queue
),
ins AS (
    SELECT s.id, s.queue, s.due_at
    FROM inserted AS s
    WHERE (SELECT count(*) FROM leases_lowered) >= 0
),
{admission_floor}
{admission_result}
