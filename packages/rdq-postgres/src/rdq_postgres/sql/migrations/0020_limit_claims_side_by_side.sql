-- rdq schema version 20: the claims of a rate limit no longer wait for one another, and a
-- claim of a concurrency limit takes a stripe whenever it fits beside three full ones
-- (storage contract version 4, unchanged: the same claims, under the same limits).
--
-- Since version 18 a rate's bucket is a sequence (bucket_name()), but every claim of a rate
-- limit still took the control's row FOR UPDATE, to read the bucket and move it on with no
-- claim between, and held that lock to its commit: the claims of one bucket ran one after
-- the other. With 8 worker processes each claim waited ~28 ms for the lock, with a rate that
-- never binds (BENCHMARKS.md, "Limits across the fleet").
--
-- A control with a rate alone (no gate, no concurrency limit) whose bucket has its sequence
-- is now read FOR SHARE, as a concurrency limit with room is (version 15). The claim reads
-- the bucket without a lock and chooses its tasks within the tokens it found; then it takes
-- the tokens of the tasks it chose under a session advisory lock held for that read and
-- write alone (take_tokens()). Where another claim took tokens in between, it puts back the
-- last chosen tasks with the key: fewer claims, never more. A sequence is written outside
-- transactions, so nothing needs a lock held to the commit, and a claim that rolls back keeps
-- its tokens spent (version 18's rule). A rate with a gate or a concurrency limit beside it,
-- or a control without its sequence, is locked FOR UPDATE as before.
--
-- A claim of a concurrency limit ran under one of the four stripes (version 15) only while
-- half of the limit was free (4 x stripe_span()); under the stripe it takes at most
-- least(span, free - 3 x span), so it is safe whenever 3 x span + n are free, n being what it
-- asks for. With 8 workers under Concurrency(1000), whose slots and tasks claimed ahead may
-- hold most of it, one claim in twelve took the control FOR UPDATE after every claim beside
-- it, and the claims behind waited for that one: it now takes a stripe when 3 x span + n
-- are free (the first look's, or the session's remembered, room).
--
-- One function added; claim_controlled() (of 0019) replaced with only those lines changed.
-- No table changes: instant on any task table. See docs/postgres-schema.md.

-- Take up to `want` tokens from the bucket sequence `bucket` (the token bucket of version 18:
-- `size` tokens at most, one more every `spacing` microseconds) at `at_us` (microseconds since
-- 1970), and say how many it took. The read and the write run under the advisory lock
-- (lock_key, -1), held by the session for them alone (never to a commit; the stripes of
-- version 15 are (lock_key, 0 .. 3), held by transactions) and released on every way out, an
-- error or a cancel included.
CREATE FUNCTION {schema}.take_tokens(
    bucket regclass, lock_key integer, want bigint, size double precision,
    spacing double precision, at_us double precision
) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    held boolean := false;
    base double precision;  -- the bucket's arrival time with none taken, no earlier than now
    granted bigint;
BEGIN
    BEGIN
        PERFORM pg_advisory_lock(lock_key, -1);
        held := true;
        base := greatest(coalesce(pg_sequence_last_value(bucket), 0), at_us);
        granted := greatest(0, least(want, floor(size - (base - at_us) / spacing)))::bigint;
        IF granted > 0 THEN
            PERFORM setval(bucket, ceil(base + granted * spacing)::bigint, true);
        END IF;
        PERFORM pg_advisory_unlock(lock_key, -1);
        held := false;
    EXCEPTION WHEN query_canceled OR others THEN
        IF held THEN
            PERFORM pg_advisory_unlock(lock_key, -1);
        END IF;
        RAISE;
    END;
    RETURN granted;
END
$$;

-- claim_controlled of migration 0019, a rate alone (mode 'bucket') read without a lock and
-- the tokens of the tasks it chose taken at the end; a stripe taken when 3 x span + n are free.
CREATE OR REPLACE FUNCTION {schema}.claim_controlled(q text, n bigint, lease_us bigint, worker text)
RETURNS TABLE (claimed {schema}.task, claimed_due_at timestamptz, claimed_rank bigint)
LANGUAGE plpgsql VOLATILE
-- every statement planned once per connection: custom plans (plpgsql's first choice for a
-- statement with parameters) planned each of them at every claim, more work than running it
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
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
    buckets regclass[] := '{}';           -- limited[i]'s bucket sequence (or NULL)
    owed double precision[] := '{}';      -- its arrival time with nothing taken, microseconds
    spacing double precision[] := '{}';   -- and the microseconds each token takes to refill
    bucket regclass;
    arrival bigint;
    started_us double precision := extract(epoch FROM now()) * 1000000;
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
    reserved regclass[] := '{}';     -- limited[i]'s bucket, if its tokens are taken at the end
    sizes double precision[] := '{}';  -- and that bucket's size
    bucket_seq regclass;
    fewer bigint;
    dropped text[];                  -- chosen tasks put back: their tokens taken meanwhile
    free bigint;                     -- a concurrency limit's free slots, counted under its lock
    ranks jsonb;                     -- each chosen task's place in the claim order, by id
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
                    AND remembered[2] >= (stripes - 1) * {schema}.stripe_span(c.concurrency, stripes) + n
            THEN
                room := remembered[2];
            ELSE
                room := c.concurrency - {schema}.live_leases(q, c.key);
            END IF;
            IF room < 1 THEN
                mode := 'share';
            ELSIF n <= {schema}.stripe_span(c.concurrency, stripes)
                    AND room >= (stripes - 1) * {schema}.stripe_span(c.concurrency, stripes) + n THEN
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
        ELSIF c.gate IS NULL AND c.concurrency IS NULL
                AND to_regclass({schema}.bucket_name(q, c.key)) IS NOT NULL THEN
            -- a rate alone, its bucket in a sequence: read without a lock, the tokens of the
            -- tasks chosen taken at the end under a lock held for that alone (take_tokens())
            mode := 'bucket';
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
            bucket := NULL;
        ELSIF modes[i] = 'bucket' THEN
            -- read again: a gate or a concurrency limit may have joined the rate before the
            -- lock, or the rate gone: nothing with the key this time
            bucket_seq := to_regclass({schema}.bucket_name(q, c.key));
            tokens := NULL;
            bucket := NULL;
            IF c.gate IS NOT NULL OR c.concurrency IS NOT NULL OR c.rate IS NULL
                    OR bucket_seq IS NULL THEN
                room := 0;
            ELSE
                size := coalesce(c.burst, greatest(1, c.rate / 10));
                arrival := pg_sequence_last_value(bucket_seq);
                room := floor(size - greatest(0, coalesce(arrival, 0) - started_us)
                    * c.rate / (c.per * 1000000))::bigint;
            END IF;
        ELSE
            room := c.gate;
            IF c.concurrency IS NOT NULL THEN
                free := c.concurrency - {schema}.live_leases(q, c.key);
                PERFORM set_config({schema}.room_setting(q, c.key),
                    c.concurrency || '/' || free, false);
                room := least(room, free);
            END IF;
            tokens := NULL;
            bucket := NULL;
            IF c.rate IS NOT NULL THEN
                size := coalesce(c.burst, greatest(1, c.rate / 10));
                bucket := to_regclass({schema}.bucket_name(q, c.key));
                IF bucket IS NULL THEN
                    -- no sequence (a control row written by hand): the row's bucket
                    tokens := CASE WHEN c.bucket_tokens IS NULL THEN size ELSE least(size,
                        c.bucket_tokens + greatest(0, extract(epoch FROM started - c.bucket_at))
                            * c.rate / c.per) END;
                ELSE
                    -- the bucket's theoretical arrival time: full from then on (never set:
                    -- full now)
                    arrival := pg_sequence_last_value(bucket);
                    tokens := size - greatest(0, coalesce(arrival, 0) - started_us)
                        * c.rate / (c.per * 1000000);
                END IF;
                room := least(room, floor(tokens)::bigint);
            END IF;
        END IF;
        IF room IS NOT NULL AND room < 1 THEN
            blocked := blocked || c.key;
        ELSIF room IS NOT NULL THEN
            limited := limited || c.key;
            budget := budget || room;
            refilled := refilled || tokens;
            buckets := buckets || bucket;
            owed := owed || CASE WHEN bucket IS NULL THEN NULL
                ELSE started_us + (size - tokens) * c.per * 1000000 / c.rate END;
            spacing := spacing || CASE WHEN bucket IS NULL AND modes[i] <> 'bucket' THEN NULL
                ELSE c.per * 1000000 / c.rate END;
            taken := taken || 0::bigint;
            metered := metered || (c.gate IS NOT NULL OR c.rate IS NOT NULL);
            reserved := reserved || CASE WHEN modes[i] = 'bucket' THEN bucket_seq END;
            sizes := sizes || CASE WHEN modes[i] = 'bucket' THEN size END;
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
    -- The tokens of the tasks chosen, taken from each bucket read without a lock. Where
    -- another claim took some since the read, the last chosen tasks with its key are put back
    -- (fewer claims, never more); tokens already taken for them from another bucket stay
    -- spent.
    FOR i IN 1 .. cardinality(limited) LOOP
        CONTINUE WHEN reserved[i] IS NULL OR taken[i] = 0;
        got := {schema}.take_tokens(reserved[i], hashtext(q || chr(31) || limited[i]),
            taken[i], sizes[i], spacing[i], started_us);
        CONTINUE WHEN got >= taken[i];
        dropped := ARRAY(
            SELECT p.id FROM unnest(chosen) WITH ORDINALITY AS p(id, o)
            JOIN {schema}.task AS t ON t.id = p.id
            WHERE limited[i] = '*' OR limited[i] = 'handler:' || t.handler_ref
               OR limited[i] = ANY (t.keys)
            ORDER BY p.o DESC
            LIMIT taken[i] - got);
        FOR j IN 1 .. cardinality(limited) LOOP
            SELECT count(*) INTO fewer FROM {schema}.task AS t
            WHERE t.id = ANY (dropped)
              AND (limited[j] = '*' OR limited[j] = 'handler:' || t.handler_ref
                   OR limited[j] = ANY (t.keys));
            taken[j] := taken[j] - fewer;
        END LOOP;
        SELECT coalesce(array_agg(p.id ORDER BY p.o), '{}'),
               coalesce(array_agg(p.due_at ORDER BY p.o), '{}')
        INTO chosen, dues
        FROM unnest(chosen, dues) WITH ORDINALITY AS p(id, due_at, o)
        WHERE NOT (p.id = ANY (dropped));
    END LOOP;
    IF cardinality(chosen) = 0 THEN
        PERFORM {schema}.raise_floor(q);
        RETURN;
    END IF;
    -- what the claim took from gates and buckets (no change of version); only controls
    -- locked FOR UPDATE have either. A bucket with a sequence is moved on in the sequence
    -- (its arrival time later by the tokens taken, rounded up), which leaves no row version
    -- behind; a gate, or a bucket without one, in the row.
    FOR i IN 1 .. cardinality(limited) LOOP
        CONTINUE WHEN taken[i] = 0 OR reserved[i] IS NOT NULL;
        IF buckets[i] IS NOT NULL THEN
            PERFORM setval(buckets[i], ceil(owed[i] + taken[i] * spacing[i])::bigint, true);
        END IF;
        UPDATE {schema}.control AS k
        SET gate = k.gate - taken[i],
            bucket_tokens = CASE WHEN k.rate IS NULL THEN k.bucket_tokens
                ELSE refilled[i] - taken[i] END,
            bucket_at = CASE WHEN k.rate IS NULL THEN k.bucket_at
                ELSE greatest(started, k.bucket_at) END
        WHERE k.queue = q AND k.key = limited[i]
          AND (k.gate IS NOT NULL OR (k.rate IS NOT NULL AND buckets[i] IS NULL));
    END LOOP;

    -- The claim of the chosen tasks: claim.sql's lease and LEASE_EXPIRED record, the rows
    -- found by primary key (no join: a plan made on a table analyzed empty would scan it).
    SELECT jsonb_object_agg(p.id, p.rank) INTO ranks
    FROM unnest(chosen) WITH ORDINALITY AS p(id, rank);
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
        WHERE t.id = ANY (chosen)
        RETURNING t, dues[(ranks ->> t.id)::integer], (ranks ->> t.id)::bigint
    )
    SELECT * FROM leased;
    PERFORM {schema}.lower_lease_floor(q, started + lease_us * interval '1 microsecond');
    PERFORM {schema}.raise_floor(q);
END
$$;
