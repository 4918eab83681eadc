-- rdq schema version 14: the claim floor, where a claim's scan of a queue starts.
--
-- While a transaction elsewhere holds the xmin horizon (an idle `BEGIN`, a long report, a
-- replica with hot_standby_feedback), the index entries of every task claimed since cannot be
-- removed, and a claim that scans task_claim_priority_idx from the oldest entry of its queue
-- walks past all of them: on schema 10 two workers drained 0.26 of their clean rate after 90 s
-- of it (BENCHMARKS.md, "A held xmin"). A claim now starts at the queue's floor, a due time
-- no live (PENDING or IN_FLIGHT) task of the queue is due before, so it walks only the dead
-- entries above it. The floor is exact:
--
-- * Every write that makes a task due (an admission, also under a dedup key and a debounce
--   that moves its holder, a retry, a redrive, a retry-now, a lease extension, an import)
--   calls lower_floor(queue, due) in its transaction. It takes a shared
--   transaction advisory lock of the queue (held to the commit, never waited on by another
--   writer) and, when the due time lies more than floor_lag() behind the database clock,
--   lowers the queue's row in claim_floor to it and gives that row a new `gen`.
-- * Claims raise the floor, each claiming connection its own (raise_floor(), after each
--   claim): it takes the queue's advisory lock exclusively if no writer holds it (else it
--   tries again at the next claim), reads the oldest due time of the queue's live tasks with
--   a snapshot taken after the lock, caps it at the clock less floor_lag(), and keeps the
--   result with the row's `gen` in a setting of its session. A writer that comes after the
--   raise either writes a due time no earlier than the clock less floor_lag() at its lock,
--   which is later than the raise's cap, or lowers the row, which changes its `gen`; a
--   writer before the raise committed before the raise's snapshot.
-- * claim_floor(queue), read by a claim in the snapshot of its scan: the session's raised
--   floor while the row's `gen` is the one it was raised at, else the row's `low` (a floor
--   for every session: the raises publish it at most once a second, the lowerings lower it).
--
-- * A writer that does not call lower_floor() (a binding of schema version 13 or older, SQL
--   written by hand after the documented statements of an earlier version) could leave a
--   due task under the floor, which no claim would reach. So once every floor_rescan() (30 s)
--   per queue, a raise (the one that takes the queue's scan lock, another advisory lock)
--   reads the queue below its floor while holding no lock a writer or another claim waits
--   for (that read walks every entry a held horizon keeps there), lowers the row to a task it
--   finds and stamps the row's `scanned_at`: such a task waits at most that long more, and is
--   claimed in order from then on.
--
-- A row of claim_floor changes only when a write lowers it or once a second at most by a
-- raise, so a held horizon leaves few versions of it behind; the raises themselves write
-- nothing else. A raise never waits for the row: one that another transaction holds (a
-- lowering, or a raise in a claim whose transaction is still open) is left as it is, so
-- claims do not queue behind each other on it (0013's claims of a limit with room run side
-- by side). A claim that rolls back takes its raise with it (the session setting and the row
-- are transactional). See docs/postgres-schema.md.
--
-- One table, one sequence and six functions added; replaced, with their arguments, results
-- and effects unchanged: claim_due() (of 0009) and the reads of claim_controlled(),
-- due_unblocked() and ordered_candidates() (of 0013) with the floor in their scans,
-- claim_controlled() (of 0013) raising the floor after its claim, admit_task() (of 0011)
-- lowering it. Each is its latest version with only those lines added, so nothing 0011 or
-- 0013 did is undone. Instant on any task table.

CREATE TABLE {schema}.claim_floor (
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

CREATE SEQUENCE {schema}.claim_floor_gen;

-- How far behind the database clock a raise keeps the floor: a write due at its own
-- transaction's start (every plain admission, a redrive, a retry-now) that reaches its lock
-- within this lowers nothing. A claim of a queue that keeps up walks the dead entries of
-- about this long.
CREATE FUNCTION {schema}.floor_lag() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT interval '50 milliseconds'
$$;

-- How often a raise reads the queue below its floor (a safety net for writers that do not
-- lower the floor: see above).
CREATE FUNCTION {schema}.floor_rescan() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT interval '30 seconds'
$$;

-- The session setting that holds a connection's raised floor of queue q:
-- '<gen>/<floor, microseconds since 1970>/<when raised, the same>'.
CREATE FUNCTION {schema}.floor_setting(q text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'rdq_floor.q' || md5('{schema}.' || q)
$$;

-- A write that makes tasks of queue q due, the earliest at due: called in its transaction.
-- Holds the queue's shared advisory lock to the commit (no raise runs meanwhile) and lowers
-- the queue's floor when due is more than floor_lag() behind the clock.
CREATE FUNCTION {schema}.lower_floor(q text, due timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF due IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtext('{schema}.claim_floor'), hashtext(q));
    IF due >= clock_timestamp() - {schema}.floor_lag() THEN
        RETURN false;
    END IF;
    INSERT INTO {schema}.claim_floor AS f (queue, low, gen, raised_at)
    VALUES (q, '-infinity', nextval('{schema}.claim_floor_gen'), '-infinity')
    ON CONFLICT (queue) DO UPDATE
    SET low = least(f.low, due), gen = nextval('{schema}.claim_floor_gen');
    RETURN true;
END
$$;

-- The floor of queue q for a claim, read in the snapshot of the claim's scan (STABLE: the
-- caller's): no live task of q that this snapshot sees is due before it.
CREATE FUNCTION {schema}.claim_floor(q text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    f record;
    raised text[] := string_to_array(current_setting({schema}.floor_setting(q), true), '/');
BEGIN
    SELECT c.low, c.gen INTO f FROM {schema}.claim_floor AS c WHERE c.queue = q;
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
CREATE FUNCTION {schema}.raise_floor(q text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_sort = off
AS $$
DECLARE
    k1 integer := hashtext('{schema}.claim_floor');
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
        cap := clock - {schema}.floor_lag();
        -- this statement and the ones after it read with snapshots taken after the lock
        SELECT c.low, c.gen, c.raised_at, c.scanned_at INTO f FROM {schema}.claim_floor AS c WHERE c.queue = q;
        found_row := FOUND;
        start := CASE WHEN found_row THEN {schema}.claim_floor(q) ELSE '-infinity' END;
        SELECT t.due_at INTO pending FROM {schema}.task AS t
        WHERE t.queue = q AND t.status = 'PENDING' AND t.due_at >= start AND t.due_at < cap
        ORDER BY t.due_at LIMIT 1;
        -- a lapsed lease, only where it would lower the floor below the oldest PENDING task
        -- (the ends of leases since resolved lie between: a held horizon keeps them all)
        SELECT t.due_at INTO leased FROM {schema}.task AS t
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
                AND pg_try_advisory_xact_lock(hashtext('{schema}.claim_floor_make'), k2) THEN
            gen := nextval('{schema}.claim_floor_gen');
            INSERT INTO {schema}.claim_floor AS c (queue, low, gen, raised_at)
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
            PERFORM 1 FROM {schema}.claim_floor AS c
            WHERE c.queue = q AND c.gen = f.gen AND c.low < raised
            FOR UPDATE SKIP LOCKED;
            IF FOUND THEN  -- locked, its latest version read: gen and low as checked
                UPDATE {schema}.claim_floor AS c SET low = raised, raised_at = clock
                WHERE c.queue = q;
            END IF;
        END IF;
    END IF;
    -- Once every floor_rescan() per queue, by the raise that takes the queue's scan lock
    -- (not the writers' lock, and no row lock while it reads: nobody waits for this read,
    -- which walks every entry a held horizon keeps below the floor): a PENDING task under
    -- the floor, left by a writer that did not lower it, lowers the row (a new gen, as
    -- lower_floor() gives it); then scanned_at is stamped.
    IF found_row AND f.scanned_at < clock - {schema}.floor_rescan()
            AND pg_try_advisory_lock(hashtext('{schema}.claim_floor_scan'), k2) THEN
        BEGIN
            SELECT t.due_at INTO stray FROM {schema}.task AS t
            WHERE t.queue = q AND t.status = 'PENDING' AND t.due_at < start
            ORDER BY t.due_at LIMIT 1;
        EXCEPTION
            WHEN query_canceled THEN
                PERFORM pg_advisory_unlock(hashtext('{schema}.claim_floor_scan'), k2);
                RAISE;
            WHEN OTHERS THEN
                PERFORM pg_advisory_unlock(hashtext('{schema}.claim_floor_scan'), k2);
                RAISE;
        END;
        PERFORM pg_advisory_unlock(hashtext('{schema}.claim_floor_scan'), k2);
        -- the row, without waiting for it: held by another transaction, it is neither
        -- lowered nor stamped here, and a later raise reads below the floor again
        PERFORM 1 FROM {schema}.claim_floor AS c WHERE c.queue = q FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            NULL;
        ELSIF stray IS NOT NULL THEN
            UPDATE {schema}.claim_floor AS c
            SET low = least(c.low, stray), gen = nextval('{schema}.claim_floor_gen'),
                scanned_at = clock
            WHERE c.queue = q
            RETURNING c.gen INTO gen;
            raised := least(raised, stray);
        ELSE
            UPDATE {schema}.claim_floor AS c SET scanned_at = clock
            WHERE c.queue = q AND c.scanned_at < clock;
        END IF;
    END IF;
    PERFORM set_config({schema}.floor_setting(q), gen || '/'
        || floor(extract(epoch FROM raised) * 1000000)::bigint || '/'
        || floor(extract(epoch FROM clock) * 1000000)::bigint, false);
END
$$;

-- claim_due of migration 0009, its scan starting at the queue's floor, and the floor raised
-- after the claim.
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
          AND due_at >= (SELECT {schema}.claim_floor(q))
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
    PERFORM {schema}.raise_floor(q);
END
$$;

-- due_unblocked of migration 0013 (claim_controlled's strict-order read), its scan starting
-- at the queue's floor, read in the scan's own snapshot.
CREATE OR REPLACE FUNCTION {schema}.due_unblocked(
    q text, started timestamptz, blocked text[], passed text[], want bigint
)
RETURNS TABLE (id text, handler_ref text, keys text[], due_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_sort = off
AS $$
BEGIN
    RETURN QUERY
    SELECT t.id, t.handler_ref, t.keys, t.due_at
    FROM {schema}.task AS t
    WHERE t.priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
      AND t.queue = q
      AND t.status IN ('PENDING', 'IN_FLIGHT')
      AND t.due_at <= started
      AND t.due_at >= (SELECT {schema}.claim_floor(q))
      AND NOT (('handler:' || t.handler_ref) = ANY (blocked))
      AND NOT (t.keys && blocked)
      AND t.id <> ALL (passed)
    ORDER BY t.priority DESC, t.due_at
    LIMIT want
    FOR UPDATE OF t SKIP LOCKED;
END
$$;

-- ordered_candidates of migration 0013 (claim_controlled's fair or aged read), each group's
-- scan of each priority starting at the queue's floor, read in the scan's own snapshot (the
-- read of the groups themselves is unchanged).
CREATE OR REPLACE FUNCTION {schema}.ordered_candidates(
    q text, started timestamptz, blocked text[], fair boolean, aging_s double precision,
    depth bigint
)
RETURNS TABLE (id text, due_at timestamptz, more boolean)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    IF fair THEN
        RETURN QUERY
        WITH RECURSIVE groups (g) AS (
            (SELECT t.grp FROM {schema}.task AS t
             WHERE t.queue = q AND t.grp IS NOT NULL AND t.status IN ('PENDING', 'IN_FLIGHT')
             ORDER BY t.grp LIMIT 1)
            UNION ALL
            SELECT (SELECT t.grp FROM {schema}.task AS t
                    WHERE t.queue = q AND t.grp > groups.g AND t.grp IS NOT NULL
                      AND t.status IN ('PENDING', 'IN_FLIGHT')
                    ORDER BY t.grp LIMIT 1)
            FROM groups WHERE groups.g IS NOT NULL
        ),
        heads AS (
            SELECT h.id, h.due_at, h.priority, groups.g AS grp,
                   h.due_at - h.priority * aging_s * interval '1 second' AS aged,
                   count(*) OVER (PARTITION BY groups.g, h.priority) AS level_count
            FROM groups
            CROSS JOIN unnest('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[]) AS l(p)
            CROSS JOIN LATERAL (
                SELECT t.id, t.due_at, t.priority
                FROM {schema}.task AS t
                WHERE t.queue = q AND t.grp = groups.g AND t.priority = l.p
                  AND t.status IN ('PENDING', 'IN_FLIGHT')
                  AND t.due_at <= started
                  AND t.due_at >= (SELECT {schema}.claim_floor(q))
                  AND NOT (('handler:' || t.handler_ref) = ANY (blocked))
                  AND NOT (t.keys && blocked)
                ORDER BY t.due_at
                LIMIT depth
            ) AS h
            WHERE groups.g IS NOT NULL AND NOT (groups.g = ANY (blocked))
        ),
        ranked AS (
            SELECT heads.id, heads.due_at, heads.priority, heads.aged,
                   row_number() OVER (
                       PARTITION BY heads.grp
                       ORDER BY heads.aged, heads.priority DESC, heads.due_at) AS rank,
                   bool_or(heads.level_count >= depth) OVER (PARTITION BY heads.grp) AS more
            FROM heads
        )
        SELECT ranked.id, ranked.due_at, ranked.more
        FROM ranked
        WHERE ranked.rank <= depth
        ORDER BY ranked.rank, ranked.aged, ranked.priority DESC, ranked.due_at;
    ELSE
        RETURN QUERY
        WITH heads AS (
            SELECT h.id, h.due_at, h.priority,
                   h.due_at - h.priority * aging_s * interval '1 second' AS aged,
                   count(*) OVER (PARTITION BY h.priority) AS level_count
            FROM unnest('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[]) AS l(p)
            CROSS JOIN LATERAL (
                SELECT t.id, t.due_at, t.priority
                FROM {schema}.task AS t
                WHERE t.priority = l.p AND t.queue = q
                  AND t.status IN ('PENDING', 'IN_FLIGHT')
                  AND t.due_at <= started
                  AND t.due_at >= (SELECT {schema}.claim_floor(q))
                  AND NOT (('handler:' || t.handler_ref) = ANY (blocked))
                  AND NOT (t.keys && blocked)
                ORDER BY t.due_at
                LIMIT depth
            ) AS h
        ),
        ranked AS (
            SELECT heads.id, heads.due_at, heads.priority, heads.aged,
                   row_number() OVER (ORDER BY heads.aged, heads.priority DESC, heads.due_at)
                       AS rank,
                   bool_or(heads.level_count >= depth) OVER () AS more
            FROM heads
        )
        SELECT ranked.id, ranked.due_at, ranked.more
        FROM ranked
        WHERE ranked.rank <= depth
        ORDER BY ranked.rank;
    END IF;
END
$$;

-- claim_controlled of migration 0013, reading its tasks through the two functions above, and
-- the floor raised after the claim (also after a claim that took nothing; not when the queue
-- is paused or used up, which reads no task).
CREATE OR REPLACE FUNCTION {schema}.claim_controlled(q text, n bigint, lease_us bigint, worker text)
RETURNS TABLE (claimed {schema}.task, claimed_due_at timestamptz, claimed_rank bigint)
LANGUAGE plpgsql VOLATILE
-- every statement planned once per connection: custom plans (plpgsql's first choice for a
-- statement with parameters) planned each of them at every claim, more work than running it
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    stripes CONSTANT integer := 8;   -- claims of one key that may run side by side
    span CONSTANT bigint := 32;      -- the most tasks such a claim takes
    started timestamptz := now();
    c record;
    r record;
    keys_seen text[] := '{}';        -- the limiting controls, in key order, and how to lock
    modes text[] := '{}';            -- each: 'share' (blocked), 'stripe', 'update'
    blocked text[] := '{}';          -- keys that let nothing through (paused, used up)
    limited text[] := '{}';          -- keys that let some through
    budget bigint[] := '{}';         -- how many more tasks with limited[i] this claim may take
    refilled double precision[] := '{}';  -- the bucket of limited[i] refilled to now (or NULL)
    taken bigint[] := '{}';
    chosen text[] := '{}';
    dues timestamptz[] := '{}';
    passed text[] := '{}';           -- tasks read and left (a key of theirs ran out)
    i integer;
    j integer;
    s integer;
    queue_limit integer;             -- the index of '*' in limited, if it is
    fits boolean;
    room bigint;
    size double precision;
    tokens double precision;
    mode text;
    lock_key integer;
    want bigint;
    got bigint;
    ran_out boolean;
    fair_prefix text;                -- the queue's fair shares: its groups' key prefix
    aging_s double precision;        -- the queue's priority aging: seconds per step
    r_handler text;
    r_keys text[];
    depth bigint;                    -- an ordered claim's read: how many tasks of each group
    more boolean;
BEGIN
    -- A first look, without locks: how to lock each limiting control.
    FOR c IN
        SELECT k.key, k.paused, k.gate, k.concurrency, k.rate
        FROM {schema}.control AS k
        WHERE k.queue = q
          AND (k.paused OR k.gate IS NOT NULL OR k.concurrency IS NOT NULL OR k.rate IS NOT NULL)
        ORDER BY k.key
    LOOP
        IF c.gate IS NULL AND c.concurrency IS NULL AND c.rate IS NULL THEN
            blocked := blocked || c.key;   -- a pause alone: nothing to lock
            CONTINUE;
        END IF;
        mode := 'update';
        IF c.paused THEN
            mode := 'share';
        ELSIF c.gate IS NULL AND c.rate IS NULL THEN
            room := c.concurrency - {schema}.live_leases(q, c.key);
            IF room < 1 THEN
                mode := 'share';
            ELSIF n <= span AND room >= stripes * span THEN
                lock_key := hashtext(q || chr(31) || c.key);
                s := pg_backend_pid() % stripes;
                FOR j IN 0 .. stripes - 1 LOOP
                    IF pg_try_advisory_xact_lock(lock_key, (s + j) % stripes) THEN
                        mode := 'stripe';
                        EXIT;
                    END IF;
                END LOOP;
            END IF;
        END IF;
        keys_seen := keys_seen || c.key;
        modes := modes || mode;
    END LOOP;
    IF '*' = ANY (blocked) THEN
        RETURN;
    END IF;

    -- The limiting controls locked in key order, each read again under its lock (a fresh
    -- snapshot: this function is VOLATILE), and what each lets through now.
    FOR i IN 1 .. cardinality(keys_seen) LOOP
        IF modes[i] = 'update' THEN
            SELECT k.key, k.paused, k.gate, k.concurrency, k.rate, k.per, k.burst,
                   k.bucket_tokens, k.bucket_at
            INTO c FROM {schema}.control AS k
            WHERE k.queue = q AND k.key = keys_seen[i]
            FOR UPDATE;
        ELSE
            SELECT k.key, k.paused, k.gate, k.concurrency, k.rate, k.per, k.burst,
                   k.bucket_tokens, k.bucket_at
            INTO c FROM {schema}.control AS k
            WHERE k.queue = q AND k.key = keys_seen[i]
            FOR SHARE;
        END IF;
        CONTINUE WHEN NOT FOUND;  -- deleted meanwhile: it limits nothing
        IF modes[i] = 'share' OR c.paused THEN
            blocked := blocked || c.key;
            CONTINUE;
        END IF;
        IF modes[i] = 'stripe' THEN
            -- read again: it may have been changed before the lock, to a gate or a rate too
            IF c.gate IS NOT NULL OR c.rate IS NOT NULL OR c.concurrency IS NULL THEN
                room := 0;
            ELSE
                room := least(span,
                    c.concurrency - {schema}.live_leases(q, c.key) - (stripes - 1) * span);
            END IF;
            tokens := NULL;
        ELSE
            room := c.gate;
            IF c.concurrency IS NOT NULL THEN
                room := least(room, c.concurrency - {schema}.live_leases(q, c.key));
            END IF;
            tokens := NULL;
            IF c.rate IS NOT NULL THEN
                size := coalesce(c.burst, greatest(1, c.rate / 10));
                tokens := CASE WHEN c.bucket_tokens IS NULL THEN size ELSE least(size,
                    c.bucket_tokens + greatest(0, extract(epoch FROM started - c.bucket_at))
                        * c.rate / c.per) END;
                room := least(room, floor(tokens)::bigint);
            END IF;
        END IF;
        IF room IS NOT NULL AND room < 1 THEN
            blocked := blocked || c.key;
        ELSIF room IS NOT NULL THEN
            limited := limited || c.key;
            budget := budget || room;
            refilled := refilled || tokens;
            taken := taken || 0::bigint;
        END IF;
    END LOOP;
    IF '*' = ANY (blocked) THEN
        RETURN;
    END IF;
    queue_limit := array_position(limited, '*');
    SELECT k.fair, k.aging INTO fair_prefix, aging_s
    FROM {schema}.control AS k
    WHERE k.queue = q AND k.key = '*';

    IF fair_prefix IS NULL AND aging_s IS NULL THEN
        -- The first due tasks in claim order that no blocked key holds back and no other
        -- claimant holds, read by one statement; each one taken unless a key of its ran out
        -- while the ones before it were taken. A key that ran out joins the blocked keys and
        -- the rest is read again without its tasks (the ones read and left are passed over).
        LOOP
            want := n - cardinality(chosen);
            got := 0;
            ran_out := false;
            FOR r IN
                SELECT * FROM {schema}.due_unblocked(q, started, blocked, chosen || passed, want)
            LOOP
                got := got + 1;
                fits := true;
                FOR i IN 1 .. cardinality(limited) LOOP
                    IF taken[i] >= budget[i] AND (limited[i] = '*'
                            OR limited[i] = 'handler:' || r.handler_ref
                            OR limited[i] = ANY (r.keys)) THEN
                        fits := false;
                        EXIT;
                    END IF;
                END LOOP;
                IF NOT fits THEN
                    passed := passed || r.id;
                    CONTINUE;
                END IF;
                FOR i IN 1 .. cardinality(limited) LOOP
                    IF limited[i] = '*' OR limited[i] = 'handler:' || r.handler_ref
                            OR limited[i] = ANY (r.keys) THEN
                        taken[i] := taken[i] + 1;
                        IF taken[i] >= budget[i] THEN
                            ran_out := true;
                        END IF;
                    END IF;
                END LOOP;
                chosen := chosen || r.id;
                dues := dues || r.due_at;
            END LOOP;
            EXIT WHEN cardinality(chosen) >= n OR got < want OR NOT ran_out;
            -- the queue's own limit used up: nothing behind can be taken
            EXIT WHEN queue_limit IS NOT NULL AND taken[queue_limit] >= budget[queue_limit];
            FOR i IN 1 .. cardinality(limited) LOOP
                IF taken[i] >= budget[i] AND NOT (limited[i] = ANY (blocked)) THEN
                    blocked := blocked || limited[i];
                END IF;
            END LOOP;
        END LOOP;
    ELSE
        -- the order the queue's own control asks for (rdq.spi.ClaimOrder), as
        -- ordered_candidates() ranks the first `depth` due tasks of each group; a deeper read
        -- only when those were not enough (taken by others, held back) and a group had more
        depth := n;
        LOOP
            more := false;
            FOR r IN
                SELECT * FROM {schema}.ordered_candidates(
                    q, started, blocked, fair_prefix IS NOT NULL, aging_s, depth)
            LOOP
                more := more OR r.more;
                CONTINUE WHEN r.id = ANY (chosen) OR r.id = ANY (passed);
                IF cardinality(limited) > 0 THEN
                    SELECT t.handler_ref, t.keys INTO r_handler, r_keys
                    FROM {schema}.task AS t WHERE t.id = r.id;
                END IF;
                fits := true;
                FOR i IN 1 .. cardinality(limited) LOOP
                    IF taken[i] >= budget[i] AND (limited[i] = '*'
                            OR limited[i] = 'handler:' || r_handler
                            OR limited[i] = ANY (r_keys)) THEN
                        fits := false;
                        EXIT;
                    END IF;
                END LOOP;
                IF NOT fits THEN
                    passed := passed || r.id;
                    CONTINUE;
                END IF;
                -- still due and not another claimant's (a fresh look at the row, under its lock)
                PERFORM 1 FROM {schema}.task AS t
                WHERE t.id = r.id AND t.status IN ('PENDING', 'IN_FLIGHT')
                  AND t.due_at <= started
                FOR UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    passed := passed || r.id;
                    CONTINUE;
                END IF;
                FOR i IN 1 .. cardinality(limited) LOOP
                    IF limited[i] = '*' OR limited[i] = 'handler:' || r_handler
                            OR limited[i] = ANY (r_keys) THEN
                        taken[i] := taken[i] + 1;
                    END IF;
                END LOOP;
                chosen := chosen || r.id;
                dues := dues || r.due_at;
                EXIT WHEN cardinality(chosen) >= n;
                -- the queue's own limit used up: nothing behind can be taken
                EXIT WHEN queue_limit IS NOT NULL AND taken[queue_limit] >= budget[queue_limit];
            END LOOP;
            EXIT WHEN cardinality(chosen) >= n OR NOT more;
            EXIT WHEN queue_limit IS NOT NULL AND taken[queue_limit] >= budget[queue_limit];
            depth := depth * 4;
        END LOOP;
    END IF;
    IF cardinality(chosen) = 0 THEN
        PERFORM {schema}.raise_floor(q);
        RETURN;
    END IF;
    -- what the claim took from gates and buckets (no change of version); only controls
    -- locked FOR UPDATE have either
    FOR i IN 1 .. cardinality(limited) LOOP
        CONTINUE WHEN taken[i] = 0;
        UPDATE {schema}.control AS k
        SET gate = k.gate - taken[i],
            bucket_tokens = CASE WHEN k.rate IS NULL THEN k.bucket_tokens
                ELSE refilled[i] - taken[i] END,
            bucket_at = CASE WHEN k.rate IS NULL THEN k.bucket_at
                ELSE greatest(started, k.bucket_at) END
        WHERE k.queue = q AND k.key = limited[i] AND (k.gate IS NOT NULL OR k.rate IS NOT NULL);
    END LOOP;

    -- The claim of the chosen tasks: claim.sql's lease and LEASE_EXPIRED record.
    RETURN QUERY
    WITH leased AS (
        UPDATE {schema}.task AS t
        SET status = 'IN_FLIGHT',
            token = gen_random_uuid()::text,
            claimed_at = started,
            claimed_by = worker,
            lease_expires_at = started + lease_us * interval '1 microsecond',
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
                    'finished_at', {schema}.rfc3339(started),
                    'worker_id', t.claimed_by
                ))
                ELSE t.attempts
            END,
            quarantine = CASE WHEN t.status = 'IN_FLIGHT' AND json_typeof(t.attempts) <> 'array'
                THEN {schema}.quarantine_add(t.quarantine, 'attempts', t.attempts)
                ELSE t.quarantine END
        FROM unnest(chosen, dues) WITH ORDINALITY AS d(id, due_at, rank)
        WHERE t.id = d.id
        RETURNING t, d.due_at, d.rank
    )
    SELECT * FROM leased;
    PERFORM {schema}.raise_floor(q);
END
$$;

-- admit_task of migration 0011 (admissions under a dedup key, admit.sql), lowering the
-- floor in the same transaction for the task it adds and for a holder a debounce makes due
-- (a replacement keeps its holder's due time; an extension or a skip makes nothing due).
CREATE OR REPLACE FUNCTION {schema}.admit_task(
    p_key text, p_mode text, p_window_us bigint, p_max_age_us bigint,
    p_id text, p_queue text, p_handler_ref text, p_payload json, p_headers json,
    p_attempt_count integer, p_redrive_count integer, p_attempts json, p_error_type text,
    p_next_attempt_at timestamptz, p_delay_us bigint, p_retry json, p_format_version integer,
    p_extra json, p_priority smallint, p_keys text[]
) RETURNS TABLE (outcome text, task_id text, queue text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := now();
    v_found text;
    v_hold record;
    v_due timestamptz;
    v_window interval := p_window_us * interval '1 microsecond';
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('rdq.dedup:' || p_key, 0));
    -- idempotent by id first, as enqueue
    SELECT t.queue INTO v_found FROM {schema}.task AS t WHERE t.id = p_id;
    IF FOUND THEN
        RETURN QUERY SELECT CASE WHEN v_found = p_queue THEN 'skipped' ELSE 'id_conflict' END,
                            p_id, v_found;
        RETURN;
    END IF;
    SELECT d.task_id AS holder, d.queue AS held_in, d.held_until, t.status, t.created_at
      INTO v_hold
      FROM {schema}.dedup AS d JOIN {schema}.task AS t ON t.id = d.task_id
     WHERE d.key = p_key;
    IF FOUND AND (CASE WHEN v_hold.held_until IS NOT NULL THEN v_hold.held_until > v_now
                       ELSE v_hold.status IN ('PENDING', 'IN_FLIGHT') END) THEN
        IF v_hold.held_in <> p_queue THEN
            RETURN QUERY SELECT 'dedup_conflict'::text, v_hold.holder, v_hold.held_in;
            RETURN;
        END IF;
        IF p_mode = 'extend' AND p_window_us IS NOT NULL THEN
            UPDATE {schema}.dedup SET held_until = v_now + v_window WHERE key = p_key;
            RETURN QUERY SELECT 'extended'::text, v_hold.holder, v_hold.held_in;
            RETURN;
        END IF;
        IF p_mode IN ('replace', 'debounce') AND v_hold.status = 'PENDING' THEN
            IF p_mode = 'debounce' THEN
                v_due := GREATEST(v_now, LEAST(
                    COALESCE(p_next_attempt_at, v_now + p_delay_us * interval '1 microsecond'),
                    v_hold.created_at + p_max_age_us * interval '1 microsecond'));
                IF p_window_us IS NOT NULL THEN
                    UPDATE {schema}.dedup SET held_until = v_now + v_window WHERE key = p_key;
                END IF;
            END IF;
            UPDATE {schema}.task
               SET payload = p_payload, headers = p_headers,
                   next_attempt_at = COALESCE(v_due, next_attempt_at)
             WHERE id = v_hold.holder AND status = 'PENDING';
            IF FOUND AND v_due IS NOT NULL THEN
                -- a debounce made the holder due at v_due, perhaps before the floor
                PERFORM {schema}.lower_floor(v_hold.held_in, v_due);
            END IF;
            RETURN QUERY SELECT 'replaced'::text, v_hold.holder, v_hold.held_in;
            RETURN;
        END IF;
        RETURN QUERY SELECT 'skipped'::text, v_hold.holder, v_hold.held_in;
        RETURN;
    END IF;
    INSERT INTO {schema}.task (
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, error_type, created_at, next_attempt_at, retry, format_version, extra,
        priority, keys
    )
    VALUES (
        p_id, p_queue, p_handler_ref, p_payload, p_headers, 'PENDING', p_attempt_count,
        p_redrive_count, p_attempts, p_error_type, v_now,
        COALESCE(p_next_attempt_at, v_now + p_delay_us * interval '1 microsecond'),
        p_retry, p_format_version, p_extra, p_priority, p_keys
    )
    ON CONFLICT (id) DO NOTHING
    RETURNING next_attempt_at INTO v_due;
    IF NOT FOUND THEN  -- an enqueue of the same id (which takes no key lock) got there first
        SELECT t.queue INTO v_found FROM {schema}.task AS t WHERE t.id = p_id;
        RETURN QUERY SELECT CASE WHEN v_found = p_queue THEN 'skipped' ELSE 'id_conflict' END,
                            p_id, v_found;
        RETURN;
    END IF;
    -- the task added is due at v_due, perhaps before the floor
    PERFORM {schema}.lower_floor(p_queue, v_due);
    INSERT INTO {schema}.dedup AS d (key, task_id, queue, held_until)
    VALUES (p_key, p_id, p_queue, v_now + v_window)
    ON CONFLICT (key) DO UPDATE
        SET task_id = EXCLUDED.task_id, queue = EXCLUDED.queue, held_until = EXCLUDED.held_until;
    RETURN QUERY SELECT 'added'::text, p_id, p_queue;
END
$$;
