-- rdq schema version 10: the extension of a lapsed lease under a concurrency limit (storage
-- contract version 4).
--
-- A lapsed lease holds no slot of its keys' concurrency limits (live_leases counts live
-- leases only), so another task may take that slot; extending the lapsed lease afterwards
-- would make two tasks hold one slot. extend_lease.sql therefore extends a lapsed lease only
-- when slots_free() says every concurrency limit of the task's keys has a free slot now (a
-- live lease is extended as before: it holds its slots).
--
-- slots_free() locks the concurrency-limited controls of the task's keys in key order, as
-- claim_controlled() does, so an extension and a claim of the same slot take it one after the
-- other; each count it makes reads with a snapshot taken after those locks (a VOLATILE
-- function), so it counts the leases of a claim that held them before. One function added:
-- instant on any task table. See docs/postgres-schema.md.

-- True when every concurrency limit of queue q that applies to a task of handler h with keys
-- ks ('*', 'handler:' || h, ks) has fewer live leases than it allows.
CREATE FUNCTION {schema}.slots_free(q text, h text, ks text[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT k.key, k.concurrency
        FROM {schema}.control AS k
        WHERE k.queue = q AND k.concurrency IS NOT NULL
          AND (k.key = '*' OR k.key = 'handler:' || h OR k.key = ANY (ks))
        ORDER BY k.key
        FOR UPDATE
    LOOP
        IF {schema}.live_leases(q, c.key) >= c.concurrency THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN true;
END
$$;
