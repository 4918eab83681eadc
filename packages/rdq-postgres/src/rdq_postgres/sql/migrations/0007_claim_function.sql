-- rdq schema version 7: the claim of a queue no control restricts, as a function.
--
-- * claim_due(q, n, lease_us, worker): claim.sql's statement of version 6 in a function that
--   plans it once per connection (a generic plan, SET plan_cache_mode), not at every claim.
--   Planned per call, the statement took 0.3-0.55 ms to plan and as little to run: the planner
--   sees LIMIT n, a parameter, as 10 % of the queue's due tasks, so it never chose the generic
--   plan on its own. The claimed ids reach the update as an array unnested with their
--   places (a generic plan takes it for a few rows: a primary-key lookup for any n), not as
--   the scan's result, which a generic plan takes for 10 % of the due tasks (a hash join
--   over the whole table). claimed_rank is each claim's place in the claim order (no
--   claimed_due_at: RETURNING has no order, and the rank is what a binding sorts by). It
--   returns the columns themselves, not a row of the table that the caller would take apart
--   field by field.
--
-- One function added: instant on any task table. See docs/postgres-schema.md.

CREATE FUNCTION {schema}.claim_due(q text, n bigint, lease_us bigint, worker text)
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
    FROM picked AS p
    WHERE t.id = p.id
    RETURNING t.id, t.queue, t.handler_ref, t.payload, t.headers,
              t.status, t.attempt_count, t.redrive_count, t.attempts, t.created_at,
              t.next_attempt_at, t.lease_expires_at, t.completed_at, t.dead_lettered_at, t.retry,
              t.priority, t.keys, t.claimed_by, t.claimed_at, t.cancelled_at,
              t.format_version, t.extra, t.quarantine, t.token,
              p.rank;
END
$$;
