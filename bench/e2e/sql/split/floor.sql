-- The claim floor of split.live for bench/e2e/split_layout_experiment.py: rdq's claim floor
-- (migration 0014, docs/postgres-schema.md), its table, sequence and functions copied as they
-- are with rdq.task read as split.live, so that the prototype's claim and admission do what
-- today's do (a claim starts its scan at the queue's floor and raises it after; an admission
-- lowers it). The comments are 0014's.

CREATE TABLE split.claim_floor (
    queue     text        PRIMARY KEY,
    -- no live task of the queue is due before it, but a write in progress that lowers it
    low       timestamptz NOT NULL,
    -- a new value (from claim_floor_gen) at every write that lowered `low`
    gen       bigint      NOT NULL,
    -- when a raise last wrote `low`
    raised_at timestamptz NOT NULL,
    -- when a raise last read the queue below the floor (floor_rescan())
    scanned_at timestamptz NOT NULL DEFAULT '-infinity'
);

CREATE SEQUENCE split.claim_floor_gen;

-- How far behind the database clock a raise keeps the floor: a write due at its own
-- transaction's start (every plain admission, a redrive, a retry-now) that reaches its lock
-- within this lowers nothing. A claim of a queue that keeps up walks the dead entries of
-- about this long.
CREATE FUNCTION split.floor_lag() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT interval '50 milliseconds'
$$;

-- How often a raise reads the queue below its floor (a safety net for writers that do not
-- lower the floor: see above).
CREATE FUNCTION split.floor_rescan() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT interval '30 seconds'
$$;

-- The session setting that holds a connection's raised floor of queue q:
-- '<gen>/<floor, microseconds since 1970>/<when raised, the same>'.
CREATE FUNCTION split.floor_setting(q text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'rdq_floor.q' || md5('split.' || q)
$$;

-- A write that makes tasks of queue q due, the earliest at due: called in its transaction.
-- Holds the queue's shared advisory lock to the commit (no raise runs meanwhile) and lowers
-- the queue's floor when due is more than floor_lag() behind the clock.
CREATE FUNCTION split.lower_floor(q text, due timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF due IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtext('split.claim_floor'), hashtext(q));
    IF due >= clock_timestamp() - split.floor_lag() THEN
        RETURN false;
    END IF;
    INSERT INTO split.claim_floor AS f (queue, low, gen, raised_at)
    VALUES (q, '-infinity', nextval('split.claim_floor_gen'), '-infinity')
    ON CONFLICT (queue) DO UPDATE
    SET low = least(f.low, due), gen = nextval('split.claim_floor_gen');
    RETURN true;
END
$$;

-- The floor of queue q for a claim, read in the snapshot of the claim's scan (STABLE: the
-- caller's): no live task of q that this snapshot sees is due before it.
CREATE FUNCTION split.claim_floor(q text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    f record;
    raised text[] := string_to_array(current_setting(split.floor_setting(q), true), '/');
BEGIN
    SELECT c.low, c.gen INTO f FROM split.claim_floor AS c WHERE c.queue = q;
    IF NOT FOUND THEN
        RETURN '-infinity';
    END IF;
    IF cardinality(raised) = 3 AND raised[1]::bigint = f.gen THEN
        RETURN greatest(f.low, timestamptz 'epoch' + raised[2]::bigint * interval '1 microsecond');
    END IF;
    RETURN f.low;
END
$$;

-- After a claim of queue q: raise this session's floor of q to the oldest due time of the
-- queue's live tasks (at most the clock less floor_lag()), when no write that makes a task
-- of q due is in progress; nothing when one is (the next claim tries again).
CREATE FUNCTION split.raise_floor(q text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_sort = off
AS $$
DECLARE
    k1 integer := hashtext('split.claim_floor');
    k2 integer := hashtext(q);
    f record;
    found_row boolean;
    start timestamptz;
    clock timestamptz;
    cap timestamptz;
    pending timestamptz;
    leased timestamptz;
    raised timestamptz;
    gen bigint;
    made boolean := false;
    stray timestamptz;
BEGIN
    IF NOT pg_try_advisory_lock(k1, k2) THEN
        RETURN;
    END IF;
    -- a session lock, released as soon as the oldest due time is read (the claim's
    -- transaction commits later: writers need not wait for it) and on every error
    BEGIN
        clock := clock_timestamp();
        cap := clock - split.floor_lag();
        -- this statement and the ones after it read with snapshots taken after the lock
        SELECT c.low, c.gen, c.raised_at, c.scanned_at INTO f FROM split.claim_floor AS c WHERE c.queue = q;
        found_row := FOUND;
        start := CASE WHEN found_row THEN split.claim_floor(q) ELSE '-infinity' END;
        SELECT t.due_at INTO pending FROM split.live AS t
        WHERE t.queue = q AND t.status = 'PENDING' AND t.due_at >= start AND t.due_at < cap
        ORDER BY t.due_at LIMIT 1;
        -- a lapsed lease, only where it would lower the floor below the oldest PENDING task
        -- (the ends of leases since resolved lie between: a held horizon keeps them all)
        SELECT t.due_at INTO leased FROM split.live AS t
        WHERE t.queue = q AND t.status = 'IN_FLIGHT' AND t.due_at >= start
          AND t.due_at < least(pending, cap)
        ORDER BY t.due_at LIMIT 1;
        raised := least(pending, leased, cap);
        -- A queue without a row: the row made here, under the lock, so no writer's INSERT
        -- is in progress beside this one (a writer takes the lock shared before it writes
        -- the row and holds it to its commit). Another raise's may be, in a claim whose
        -- transaction is still open: that raise holds claim_floor_make to its commit, and
        -- this one then makes no row and raises nothing, rather than wait for that commit.
        IF NOT found_row
                AND pg_try_advisory_xact_lock(hashtext('split.claim_floor_make'), k2) THEN
            gen := nextval('split.claim_floor_gen');
            INSERT INTO split.claim_floor AS c (queue, low, gen, raised_at)
            VALUES (q, raised, gen, clock)
            ON CONFLICT (queue) DO NOTHING;
            made := FOUND;  -- not: another raise made the row and committed since
        END IF;
    EXCEPTION
        WHEN query_canceled THEN
            PERFORM pg_advisory_unlock(k1, k2);
            RAISE;
        WHEN OTHERS THEN
            PERFORM pg_advisory_unlock(k1, k2);
            RAISE;
    END;
    PERFORM pg_advisory_unlock(k1, k2);
    IF NOT found_row AND NOT made THEN
        RETURN;  -- no row to raise against: the next claim tries again
    END IF;
    -- Publish the floor for every session, at most once a second. After the unlock: a
    -- write that lowers the row meanwhile gives it a new gen, which this write then leaves
    -- alone (or it lowers what this one wrote, once this commits). Never waiting for the
    -- row: one that a lowering or another raise holds until its transaction commits (a
    -- claim in an open transaction) is left to it, so claims never queue behind each other
    -- here (migration 0013's claims of a limit with room run side by side).
    IF found_row THEN
        gen := f.gen;
        IF raised > f.low AND f.raised_at <= clock - interval '1 second' THEN
            PERFORM 1 FROM split.claim_floor AS c
            WHERE c.queue = q AND c.gen = f.gen AND c.low < raised
            FOR UPDATE SKIP LOCKED;
            IF FOUND THEN  -- locked, its latest version read: gen and low as checked
                UPDATE split.claim_floor AS c SET low = raised, raised_at = clock
                WHERE c.queue = q;
            END IF;
        END IF;
    END IF;
    -- Once every floor_rescan() per queue, by the raise that takes the queue's scan lock
    -- (not the writers' lock, and no row lock while it reads: nobody waits for this read,
    -- which walks every entry a held horizon keeps below the floor): a PENDING task under
    -- the floor, left by a writer that did not lower it, lowers the row (a new gen, as
    -- lower_floor() gives it); then scanned_at is stamped.
    IF found_row AND f.scanned_at < clock - split.floor_rescan()
            AND pg_try_advisory_lock(hashtext('split.claim_floor_scan'), k2) THEN
        BEGIN
            SELECT t.due_at INTO stray FROM split.live AS t
            WHERE t.queue = q AND t.status = 'PENDING' AND t.due_at < start
            ORDER BY t.due_at LIMIT 1;
        EXCEPTION
            WHEN query_canceled THEN
                PERFORM pg_advisory_unlock(hashtext('split.claim_floor_scan'), k2);
                RAISE;
            WHEN OTHERS THEN
                PERFORM pg_advisory_unlock(hashtext('split.claim_floor_scan'), k2);
                RAISE;
        END;
        PERFORM pg_advisory_unlock(hashtext('split.claim_floor_scan'), k2);
        -- the row, without waiting for it: held by another transaction, it is neither
        -- lowered nor stamped here, and a later raise reads below the floor again
        PERFORM 1 FROM split.claim_floor AS c WHERE c.queue = q FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            NULL;
        ELSIF stray IS NOT NULL THEN
            UPDATE split.claim_floor AS c
            SET low = least(c.low, stray), gen = nextval('split.claim_floor_gen'),
                scanned_at = clock
            WHERE c.queue = q
            RETURNING c.gen INTO gen;
            raised := least(raised, stray);
        ELSE
            UPDATE split.claim_floor AS c SET scanned_at = clock
            WHERE c.queue = q AND c.scanned_at < clock;
        END IF;
    END IF;
    PERFORM set_config(split.floor_setting(q), gen || '/'
        || floor(extract(epoch FROM raised) * 1000000)::bigint || '/'
        || floor(extract(epoch FROM clock) * 1000000)::bigint, false);
END
$$;
