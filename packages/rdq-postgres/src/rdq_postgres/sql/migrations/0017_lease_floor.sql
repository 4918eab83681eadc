-- rdq schema version 17: the lease floor, where a count of a queue's live leases starts
-- (storage contract version 4, unchanged: the same claims, under the same limits).
--
-- A claim under a concurrency limit counts the key's live leases (live_leases(): IN_FLIGHT,
-- due_at, the lease's end, after now()), a range of task_live_idx. Every task leased within
-- the last lease length left an entry in that range, and once the task completed the entry's
-- row version is dead; a held xmin horizon (an idle `BEGIN`, a long report, a replica with
-- hot_standby_feedback) keeps all of them visible to someone, so every count walked every
-- lease taken in the last 30 s: a queue with a Concurrency(1000) that never bound drained 0.37
-- of its clean rate under a held horizon (BENCHMARKS.md, "A held xmin"), where a plain queue,
-- with the claim floor (migration 0014), keeps 0.86. The count now starts at the queue's lease
-- floor: no live lease of the queue ends before it. It is kept exactly, as the claim floor is:
--
-- * Every write of a lease (a claim, plain or controlled, an extension, an import of an
--   IN_FLIGHT task) calls lower_lease_floor(queue, lease end) in its transaction, after the
--   write. It takes the queue's shared lease lock (a transaction advisory lock, held to the
--   commit) and, with a snapshot taken after it, lowers the queue's row in lease_floor when
--   the lease ends before it. With leases of one length the lease just written ends after
--   every other, so the row is read, not written.
-- * A binding raises the floor of a queue it claims under a control (raise_lease_floor.sql,
--   a statement in a transaction of its own, at most once a second per queue): the raise
--   takes the queue's lease lock exclusively if no lease writer holds it (else a later one
--   tries again) and holds it to its commit, a few milliseconds later; with a snapshot taken
--   after the lock it reads the earliest end of a live lease (starting at the floor: no live
--   lease ends below it) and writes it to the row, at most once a second. A lease writer that
--   took its lock before the raise committed before it (the raise's snapshot sees its
--   lease); one that takes it after waits for the raise's commit and then reads the raised
--   row, and lowers it. Not in the claim's own transaction: a claim held open (a foreign
--   worker's transaction) would make every lease writer of the queue wait for it.
-- * A lease that ended before the raise's clock is not live for anyone reading the floor
--   afterwards, so the floor may pass it.
--
-- With short tasks the live leases were all taken in the last moments, so a count reads
-- about one second of leases, not a lease length. A task that runs long, its lease renewed,
-- holds the floor at its own lease's end: the count then reads the leases taken since it was
-- last renewed. The row changes at most once a second by a raise, and when a write lowers it.
--
-- One table and four functions added; replaced, with their arguments, results and effects
-- unchanged: live_leases() (of 0013) counting from the floor, claim_due() (of 0014) and
-- claim_controlled() (of 0016) lowering it after their leases. Each is its latest version
-- with only those lines added. Instant on any task table.

CREATE TABLE {schema}.lease_floor (
    queue     text        PRIMARY KEY,
    -- no live lease of the queue ends before it, but a write in progress that lowers it
    low       timestamptz NOT NULL,
    -- when a raise last wrote `low`
    raised_at timestamptz NOT NULL,
    -- when a raise last read the leases below the floor (lease_floor_rescan())
    scanned_at timestamptz NOT NULL DEFAULT '-infinity'
);

-- How often a raise reads the live leases below the floor: a safety net for a writer that
-- does not lower it (a binding of schema version 16 or older extending a lease to an earlier
-- end, or importing an IN_FLIGHT task), whose lease is then counted again within this long.
CREATE FUNCTION {schema}.lease_floor_rescan() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT interval '30 seconds'
$$;

-- A write of leases of queue q, the earliest ending at lease_end: called in its transaction,
-- after the write. Holds the queue's shared lease lock to the commit (no raise runs meanwhile)
-- and lowers the queue's lease floor when lease_end lies before it.
CREATE FUNCTION {schema}.lower_lease_floor(q text, lease_end timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
BEGIN
    IF lease_end IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtext('{schema}.lease_floor'), hashtext(q));
    -- a snapshot taken after the lock: a raise that held it has committed
    UPDATE {schema}.lease_floor AS f SET low = lease_end
    WHERE f.queue = q AND f.low > lease_end;
    RETURN FOUND;
END
$$;

-- Raise queue q's lease floor to the earliest end of a live lease of q, at most once a second,
-- when no lease write of q is in progress (nothing when one is: a later call tries again).
-- The lock it takes is held to the commit: call it in a transaction of its own.
CREATE FUNCTION {schema}.raise_lease_floor(q text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_sort = off
AS $$
DECLARE
    clock timestamptz := clock_timestamp();
    f record;
    was timestamptz;
    earliest timestamptz;
    stray timestamptz;
BEGIN
    SELECT r.low, r.raised_at, r.scanned_at INTO f FROM {schema}.lease_floor AS r WHERE r.queue = q;
    IF f.raised_at > clock - interval '1 second' THEN
        RETURN;
    END IF;
    -- Once every lease_floor_rescan() per queue, by the claim that takes the scan lock: a live
    -- lease below the floor, left by a writer that did not lower it, lowers the floor as a
    -- writer does (under the shared lease lock); read with no lock held that a writer or
    -- another claim waits for (a held horizon keeps every entry between the clock and the
    -- floor), then scanned_at is stamped.
    IF f.scanned_at <= clock - {schema}.lease_floor_rescan()
            AND pg_try_advisory_xact_lock(hashtext('{schema}.lease_floor_scan'), hashtext(q)) THEN
        SELECT t.due_at INTO stray FROM {schema}.task AS t
        WHERE t.queue = q AND t.status = 'IN_FLIGHT' AND t.due_at > clock AND t.due_at < f.low
        ORDER BY t.due_at
        LIMIT 1;
        PERFORM pg_advisory_xact_lock_shared(hashtext('{schema}.lease_floor'), hashtext(q));
        UPDATE {schema}.lease_floor AS r
        SET low = least(r.low, coalesce(stray, r.low)), scanned_at = clock
        WHERE r.queue = q;
    END IF;
    -- exclusive, unless another transaction holds it (this one's own shared lock, taken
    -- above, does not stand in the way)
    IF NOT pg_try_advisory_xact_lock(hashtext('{schema}.lease_floor'), hashtext(q)) THEN
        RETURN;
    END IF;
    -- snapshots taken after the lock: every lease written before it is committed
    SELECT r.low INTO was FROM {schema}.lease_floor AS r WHERE r.queue = q;
    SELECT t.due_at INTO earliest FROM {schema}.task AS t
    WHERE t.queue = q AND t.status = 'IN_FLIGHT'
      AND t.due_at >= coalesce(was, '-infinity') AND t.due_at > clock
    ORDER BY t.due_at
    LIMIT 1;
    -- no live lease: the next lease written lowers it
    INSERT INTO {schema}.lease_floor AS r (queue, low, raised_at)
    VALUES (q, coalesce(earliest, 'infinity'), clock)
    ON CONFLICT (queue) DO UPDATE SET low = excluded.low, raised_at = excluded.raised_at;
END
$$;

-- live_leases of migration 0013, its range starting at the queue's lease floor, read in the
-- count's own snapshot.
CREATE OR REPLACE FUNCTION {schema}.live_leases(q text, k text) RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    used bigint;
BEGIN
    -- plpgsql, not an SQL function, with a generic plan: planned once per connection, not at
    -- every call (planning took ten times the count). q and k are compared in the database's
    -- collation, whatever the caller's: a control's key is COLLATE "C", and claims passed it
    -- as it is, so t.queue was compared in "C" and the count did not read task_live_idx
    -- (it read ~200 entries of task_claim_priority_idx for 20 leases).
    SELECT count(*) INTO used FROM {schema}.task AS t
    WHERE t.queue = q COLLATE "default" AND t.status = 'IN_FLIGHT'
      AND t.due_at > greatest(now(), (
          SELECT f.low - interval '1 microsecond' FROM {schema}.lease_floor AS f
          WHERE f.queue = q COLLATE "default"))
      AND CASE
          WHEN k = '*' THEN true
          WHEN left(k, 8) = 'handler:' THEN t.handler_ref = substr(k, 9) COLLATE "default"
          ELSE k COLLATE "default" = ANY (t.keys)
      END;
    RETURN used;
END
$$;

-- claim_due of migration 0014, the lease floor lowered after a claim that leased tasks.
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
    IF FOUND THEN
        -- every task of this claim holds a lease to the same end
        PERFORM {schema}.lower_lease_floor(q, now() + lease_us::bigint * interval '1 microsecond');
    END IF;
    PERFORM {schema}.raise_floor(q);
END
$$;

-- claim_controlled of migration 0016, the lease floor lowered after its leases.
CREATE OR REPLACE FUNCTION {schema}.claim_controlled(q text, n bigint, lease_us bigint, worker text)
RETURNS TABLE (claimed {schema}.task, claimed_due_at timestamptz, claimed_rank bigint)
LANGUAGE plpgsql VOLATILE
-- every statement planned once per connection: custom plans (plpgsql's first choice for a
-- statement with parameters) planned each of them at every claim, more work than running it
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    stripes CONSTANT integer := 4;   -- claims of one key that may run side by side
    span bigint;                     -- the most tasks such a claim takes: stripe_span()
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
    metered boolean[] := '{}';       -- whether limited[i] is a gate or a rate
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
    remembered bigint[];             -- a concurrency limit and its room at this session's last count
    free bigint;                     -- a concurrency limit's free slots, counted under its lock
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
            -- the room this session's last count under a lock found, if for this limit and
            -- enough for a stripe; else a count
            remembered := string_to_array(
                current_setting({schema}.room_setting(q, c.key), true), '/')::bigint[];
            IF remembered[1] = c.concurrency
                    AND remembered[2] >= stripes * {schema}.stripe_span(c.concurrency, stripes)
            THEN
                room := remembered[2];
            ELSE
                room := c.concurrency - {schema}.live_leases(q, c.key);
            END IF;
            IF room < 1 THEN
                mode := 'share';
            ELSIF n <= {schema}.stripe_span(c.concurrency, stripes)
                    AND room >= stripes * {schema}.stripe_span(c.concurrency, stripes) THEN
                lock_key := hashtext(q || chr(31) || c.key);
                s := pg_backend_pid() % stripes;
                FOR j IN 0 .. stripes - 1 LOOP
                    IF pg_try_advisory_xact_lock(lock_key, (s + j) % stripes) THEN
                        mode := 'stripe';
                        EXIT;
                    END IF;
                END LOOP;
                IF mode <> 'stripe' THEN
                    -- every stripe held: wait for this session's own, one claim, not for
                    -- every claim of the key (FOR UPDATE waits for all of them, and every
                    -- claim that comes after waits behind it)
                    PERFORM pg_advisory_xact_lock(lock_key, s);
                    mode := 'stripe';
                END IF;
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
                span := {schema}.stripe_span(c.concurrency, stripes);
                free := c.concurrency - {schema}.live_leases(q, c.key);
                PERFORM set_config({schema}.room_setting(q, c.key),
                    c.concurrency || '/' || free, false);
                room := least(span, free - (stripes - 1) * span);
            END IF;
            tokens := NULL;
        ELSE
            room := c.gate;
            IF c.concurrency IS NOT NULL THEN
                free := c.concurrency - {schema}.live_leases(q, c.key);
                PERFORM set_config({schema}.room_setting(q, c.key),
                    c.concurrency || '/' || free, false);
                room := least(room, free);
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
            metered := metered || (c.gate IS NOT NULL OR c.rate IS NOT NULL);
        END IF;
    END LOOP;
    IF '*' = ANY (blocked) THEN
        RETURN;
    END IF;
    queue_limit := array_position(limited, '*');
    SELECT k.fair, k.aging INTO fair_prefix, aging_s
    FROM {schema}.control AS k
    WHERE k.queue = q AND k.key = '*';

    IF fair_prefix IS NULL AND aging_s IS NULL
            AND n <= coalesce((SELECT min(b) FROM unnest(budget) AS b), n) THEN
        -- No limit can run out within this claim (each lets at least n more through): the
        -- first n due tasks in claim order that no blocked key holds back, taken as read, by
        -- one statement; then what each gate or rate gave (the tasks with its key).
        SELECT coalesce(array_agg(d.id ORDER BY d.o), '{}'),
               coalesce(array_agg(d.due_at ORDER BY d.o), '{}')
        INTO chosen, dues
        FROM {schema}.due_unblocked(q, started, blocked, '{}', n)
            WITH ORDINALITY AS d(id, handler_ref, keys, due_at, o);
        FOR i IN 1 .. cardinality(limited) LOOP
            CONTINUE WHEN NOT metered[i];
            SELECT count(*) INTO got FROM {schema}.task AS t
            WHERE t.id = ANY (chosen)
              AND (limited[i] = '*' OR limited[i] = 'handler:' || t.handler_ref
                   OR limited[i] = ANY (t.keys));
            taken[i] := got;
        END LOOP;
    ELSIF fair_prefix IS NULL AND aging_s IS NULL THEN
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
    PERFORM {schema}.lower_lease_floor(q, started + lease_us * interval '1 microsecond');
    PERFORM {schema}.raise_floor(q);
END
$$;
