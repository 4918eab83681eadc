-- The claim of variant delete: lock up to n jobs of queue q, as a queue that keeps nothing
-- does (one narrow row, no status column: a locked job is one with locked_at set).
CREATE FUNCTION "delete".claim_due(q text, n bigint, worker text)
RETURNS TABLE (id text, queue text, handler_ref text, payload json, attempt_count integer,
               token text, claimed_rank bigint)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT id
        FROM "delete".job
        WHERE priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
          AND queue = q AND locked_at IS NULL AND run_at <= now()
        ORDER BY priority DESC, run_at
        LIMIT n
        FOR UPDATE SKIP LOCKED
    ),
    picked AS (
        SELECT p.id, p.rank
        FROM unnest(ARRAY(SELECT id FROM due)) WITH ORDINALITY AS p(id, rank)
    )
    UPDATE "delete".job AS j
    SET locked_at = now(), locked_by = worker, token = gen_random_uuid()::text,
        attempt_count = j.attempt_count + 1
    FROM picked AS p
    WHERE j.id = p.id
    RETURNING j.id, j.queue, j.handler_ref, j.payload, j.attempt_count, j.token, p.rank;
END
$$;
