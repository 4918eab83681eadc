-- rdq schema version 9: claim_due's plan does not depend on the table's statistics.
--
-- claim_due() plans its statement once per connection (version 7, a generic plan) with the
-- planner settings of version 8. A table analyzed while it was empty (autovacuum, a VACUUM
-- after a purge, a new deployment) that then takes a burst of tasks has no statistics for
-- them until autovacuum analyzes it again, and two plans of that state read every due task
-- at every claim (at 60,000 due tasks a claim of 10 took 52 and 168 ms against 1.0-1.2 ms;
-- BENCHMARKS.md, "A burst into a table analyzed empty", python -m bench.claim_burst):
--
-- * the planner takes every condition of the claim for its default selectivity, expects one
--   due row, and sorts the queue's live tasks from task_live_idx instead of reading
--   task_claim_priority_idx in order: enable_sort = off leaves it the ordered index scan,
--   which stops at the tasks it claims;
-- * a connection that planned the claim while the table was empty joined the claimed ids to
--   the table with the table outside, a scan of the whole primary key: the update no longer
--   joins them, it reads the table by primary key for the claimed ids (t.id = ANY, an
--   array), and each row's place in the claim order is looked up in one JSON object of them
--   (a join in either order or a search of the array for each row would cost each claim of
--   200 tasks 1.3-2 ms more, bench/claim_sizes.py).
--
-- The function's arguments, results and effects are unchanged. One CREATE OR REPLACE
-- FUNCTION: instant on any task table. See docs/postgres-schema.md.

CREATE OR REPLACE FUNCTION {schema}.claim_due(q text, n bigint, lease_us bigint, worker text)
RETURNS TABLE (
    id text, queue text, handler_ref text, payload json,
    headers json, status text, attempt_count integer, redrive_count integer,
    attempts json, created_at timestamptz, next_attempt_at timestamptz, lease_expires_at timestamptz,
    completed_at timestamptz, dead_lettered_at timestamptz, retry json, priority smallint,
    keys text[], claimed_by text, claimed_at timestamptz, cancelled_at timestamptz,
    format_version integer, extra json, quarantine json, token text,
    claimed_rank bigint
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_sort = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT id
        FROM {schema}.task
        WHERE priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
          AND queue = q
          AND status IN ('PENDING', 'IN_FLIGHT')
          AND due_at <= now()
          AND {schema}.unrestricted(q)
        ORDER BY priority DESC, due_at
        LIMIT n
        FOR UPDATE SKIP LOCKED
    ),
    picked AS (
        SELECT p.id, p.rank
        FROM unnest(ARRAY(SELECT id FROM due)) WITH ORDINALITY AS p(id, rank)
    )
    UPDATE {schema}.task AS t
    SET status = 'IN_FLIGHT',
        token = gen_random_uuid()::text,
        claimed_at = now(),
        claimed_by = worker,
        lease_expires_at = now() + lease_us::bigint * interval '1 microsecond',
        attempt_count = t.attempt_count + CASE WHEN t.status = 'IN_FLIGHT' THEN 1 ELSE 0 END,
        error_type = CASE WHEN t.status = 'IN_FLIGHT' THEN 'LeaseExpired' ELSE t.error_type END,
        attempts = CASE
            WHEN t.status = 'IN_FLIGHT' THEN {schema}.append_attempt(CASE
                WHEN json_typeof(t.attempts) = 'array' THEN t.attempts ELSE '[]' END,
                json_build_object(
                'number', t.attempt_count + 1,
                'outcome', 'LEASE_EXPIRED',
                'error_type', 'LeaseExpired',
                'error_message', 'lease expired at ' || {schema}.rfc3339(t.lease_expires_at)
                    || ' before the attempt was resolved',
                'started_at', {schema}.rfc3339(t.claimed_at),
                'finished_at', {schema}.rfc3339(now()),
                'worker_id', t.claimed_by
            ))
            ELSE t.attempts
        END,
        quarantine = CASE WHEN t.status = 'IN_FLIGHT' AND json_typeof(t.attempts) <> 'array'
            THEN {schema}.quarantine_add(t.quarantine, 'attempts', t.attempts) ELSE t.quarantine END
    WHERE t.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING t.id, t.queue, t.handler_ref, t.payload, t.headers,
              t.status, t.attempt_count, t.redrive_count, t.attempts, t.created_at,
              t.next_attempt_at, t.lease_expires_at, t.completed_at, t.dead_lettered_at, t.retry,
              t.priority, t.keys, t.claimed_by, t.claimed_at, t.cancelled_at,
              t.format_version, t.extra, t.quarantine, t.token,
              ((SELECT jsonb_object_agg(p.id, p.rank) FROM picked AS p) ->> t.id)::bigint;
END
$$;
