-- The claim of every lease + body variant (schema {variant}): rdq's claim_due() of schema 7 on
-- the narrow row, the envelope joined to what it returns; planned once per connection like it.
-- (The reclaim of an expired lease, which appends a LEASE_EXPIRED record to the body, is left
-- out: a drain has none.)
CREATE FUNCTION {variant}.claim_due(q text, n bigint, lease_us bigint, worker text)
RETURNS TABLE (
    id text, queue text, handler_ref text, payload json, headers json, status text,
    attempt_count integer, attempts json, created_at timestamptz, next_attempt_at timestamptz,
    lease_expires_at timestamptz, completed_at timestamptz, retry json, priority smallint,
    claimed_by text, claimed_at timestamptz, format_version integer, extra json, token text,
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
        FROM {variant}.lease
        WHERE priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
          AND queue = q
          AND status IN ('PENDING', 'IN_FLIGHT')
          AND due_at <= now()
          AND rdq.unrestricted(q)
        ORDER BY priority DESC, due_at
        LIMIT n
        FOR UPDATE SKIP LOCKED
    ),
    picked AS (
        SELECT p.id, p.rank
        FROM unnest(ARRAY(SELECT id FROM due)) WITH ORDINALITY AS p(id, rank)
    ),
    claimed AS (
        UPDATE {variant}.lease AS l
        SET status = 'IN_FLIGHT',
            token = gen_random_uuid()::text,
            claimed_at = now(),
            claimed_by = worker,
            lease_expires_at = now() + lease_us::bigint * interval '1 microsecond',
            attempt_count = l.attempt_count + CASE WHEN l.status = 'IN_FLIGHT' THEN 1 ELSE 0 END
        FROM picked AS p
        WHERE l.id = p.id
        RETURNING l.*, p.rank
    )
    SELECT c.id, c.queue, b.handler_ref, b.payload, b.headers, c.status, c.attempt_count,
           b.attempts, b.created_at, c.next_attempt_at, c.lease_expires_at, c.completed_at,
           b.retry, c.priority, c.claimed_by, c.claimed_at, b.format_version, b.extra, c.token,
           c.rank
    FROM claimed AS c JOIN {variant}.body AS b ON b.id = c.id;
END
$$;
