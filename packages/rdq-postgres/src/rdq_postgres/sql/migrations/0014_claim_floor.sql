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
-- * Every write that makes a task due (an admission, a retry, a redrive, a retry-now, a lease
--   extension, an import) calls lower_floor(queue, due) in its transaction. It takes a shared
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
-- nothing. A claim that rolls back takes its raise with it (the session setting and the row
-- are transactional). See docs/postgres-schema.md.
--
-- One table, one sequence and six functions added, claim_due() and claim_controlled()
-- replaced with the floor in their scans (arguments, results and effects unchanged): instant
-- on any task table.

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
    EXCEPTION
        WHEN query_canceled THEN
            PERFORM pg_advisory_unlock(k1, k2);
            RAISE;
        WHEN OTHERS THEN
            PERFORM pg_advisory_unlock(k1, k2);
            RAISE;
    END;
    PERFORM pg_advisory_unlock(k1, k2);
    -- Publish the floor for every session, at most once a second. After the unlock: a
    -- write that lowers the row meanwhile gives it a new gen, which this write then leaves
    -- alone (or it lowers what this one wrote, once this commits).
    IF NOT found_row THEN
        gen := nextval('{schema}.claim_floor_gen');
        INSERT INTO {schema}.claim_floor AS c (queue, low, gen, raised_at)
        VALUES (q, raised, gen, clock)
        ON CONFLICT (queue) DO NOTHING;
        IF NOT FOUND THEN
            RETURN;  -- a lowering or another raise made the row first: raise again next time
        END IF;
    ELSE
        gen := f.gen;
        IF raised > f.low AND f.raised_at <= clock - interval '1 second' THEN
            UPDATE {schema}.claim_floor AS c SET low = raised, raised_at = clock
            WHERE c.queue = q AND c.gen = f.gen AND c.low < raised;
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
        IF stray IS NOT NULL THEN
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

-- claim_controlled of migration 0006, its scans starting at the queue's floor, and the floor
-- raised after the claim (also after a claim that took nothing).
CREATE OR REPLACE FUNCTION {schema}.claim_controlled(q text, n bigint, lease_us bigint, worker text)
RETURNS TABLE (claimed {schema}.task, claimed_due_at timestamptz, claimed_rank bigint)
LANGUAGE plpgsql VOLATILE
-- plan the cursor below for its first rows: a claim reads a handful of them
SET cursor_tuple_fraction = 0.001
-- a fair or aged claim sorts every due task of the queue: in memory, not on disk, for a
-- backlog of about 100,000 (a sort node takes this much only when it needs it)
SET work_mem = '32MB'
AS $$
DECLARE
    started timestamptz := now();
    c record;
    r record;
    candidates refcursor;
    blocked text[] := '{}';          -- keys that let nothing through (paused, used up)
    limited text[] := '{}';          -- keys that let some through
    budget bigint[] := '{}';         -- how many more tasks with limited[i] this claim may take
    refilled double precision[] := '{}';  -- the bucket of limited[i] refilled to now (or NULL)
    taken bigint[] := '{}';
    chosen text[] := '{}';
    dues timestamptz[] := '{}';
    i integer;
    queue_limit integer;            -- the index of '*' in limited, if it is
    fits boolean;
    room bigint;
    size double precision;
    tokens double precision;
    fair_prefix text;                -- the queue's fair shares: its groups' key prefix
    aging_s double precision;        -- the queue's priority aging: seconds per step
    r_handler text;                  -- the candidate's handler_ref and keys
    r_keys text[];
BEGIN
    FOR c IN
        SELECT k.key, k.paused, k.gate, k.concurrency, k.rate, k.per, k.burst, k.bucket_tokens,
               k.bucket_at
        FROM {schema}.control AS k
        WHERE k.queue = q
          AND (k.gate IS NOT NULL OR k.concurrency IS NOT NULL OR k.rate IS NOT NULL)
        ORDER BY k.key
        FOR UPDATE
    LOOP
        IF c.paused THEN
            blocked := blocked || c.key;
            CONTINUE;
        END IF;
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
        IF room < 1 THEN
            blocked := blocked || c.key;
        ELSE
            limited := limited || c.key;
            budget := budget || room;
            refilled := refilled || tokens;
            taken := taken || 0::bigint;
        END IF;
    END LOOP;
    SELECT blocked || coalesce(array_agg(k.key), '{}') INTO blocked
    FROM {schema}.control AS k
    WHERE k.queue = q AND k.paused
      AND k.gate IS NULL AND k.concurrency IS NULL AND k.rate IS NULL;
    IF '*' = ANY (blocked) THEN
        RETURN;
    END IF;
    queue_limit := array_position(limited, '*');
    SELECT k.fair, k.aging INTO fair_prefix, aging_s
    FROM {schema}.control AS k
    WHERE k.queue = q AND k.key = '*';

    -- The due tasks none of whose keys is blocked, in claim order: with no key limited, the
    -- first n of them that no other claimant holds; else each one whose limited keys all have
    -- room left (the others are skipped).
    IF cardinality(limited) = 0 AND fair_prefix IS NULL AND aging_s IS NULL THEN
        FOR r IN
            SELECT t.id, t.due_at
            FROM {schema}.task AS t
            WHERE t.priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
              AND t.queue = q
              AND t.status IN ('PENDING', 'IN_FLIGHT')
              AND t.due_at <= started
              AND t.due_at >= (SELECT {schema}.claim_floor(q))
              AND NOT (('handler:' || t.handler_ref) = ANY (blocked))
              AND NOT (t.keys && blocked)
            ORDER BY t.priority DESC, t.due_at
            LIMIT n
            FOR UPDATE SKIP LOCKED
        LOOP
            chosen := chosen || r.id;
            dues := dues || r.due_at;
        END LOOP;
    ELSE
        -- a cursor, planned to read the first rows fast: the claim index in order, as far as
        -- the claim goes (never all due tasks, and no sort)
        IF fair_prefix IS NULL AND aging_s IS NULL THEN
            OPEN candidates FOR
                SELECT t.id, t.handler_ref, t.keys, t.due_at
                FROM {schema}.task AS t
                WHERE t.priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
                  AND t.queue = q
                  AND t.status IN ('PENDING', 'IN_FLIGHT')
                  AND t.due_at <= started
                  AND t.due_at >= (SELECT {schema}.claim_floor(q))
                  AND NOT (('handler:' || t.handler_ref) = ANY (blocked))
                  AND NOT (t.keys && blocked)
                ORDER BY t.priority DESC, t.due_at;
        ELSE
            -- the order the queue's own control asks for (rdq.spi.ClaimOrder): by rank in the
            -- task's group (its first key starting with fair_prefix, '' without one; one group
            -- when the queue is not fair), then by aged due time (due_at less priority × aging_s
            -- seconds; the same for all without aging), priority, due time. Every due task that
            -- no blocked key holds back is ranked: a sort of them all, kept narrow (the
            -- handler and keys of the few candidates visited are read in the loop below).
            OPEN candidates FOR
                SELECT o.id, NULL::text AS handler_ref, NULL::text[] AS keys, o.due_at
                FROM (
                    SELECT g.id, g.due_at, g.aged, g.priority, row_number() OVER (
                        PARTITION BY g.grp ORDER BY g.aged, g.priority DESC, g.due_at) AS rank
                    FROM (
                        SELECT t.id, t.due_at, t.priority,
                               t.due_at - t.priority * aging_s * interval '1 second' AS aged,
                               CASE
                                   WHEN fair_prefix IS NULL THEN ''
                                   -- most tasks: the first key is the group's
                                   WHEN starts_with(t.keys[1], fair_prefix) THEN t.keys[1]
                                   ELSE coalesce((
                                       SELECT u.k FROM unnest(t.keys) WITH ORDINALITY AS u(k, o)
                                       WHERE starts_with(u.k, fair_prefix)
                                       ORDER BY u.o LIMIT 1), '')
                               END AS grp
                        FROM {schema}.task AS t
                        WHERE t.priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
                          AND t.queue = q
                          AND t.status IN ('PENDING', 'IN_FLIGHT')
                          AND t.due_at <= started
                          AND t.due_at >= (SELECT {schema}.claim_floor(q))
                          AND NOT (('handler:' || t.handler_ref) = ANY (blocked))
                          AND NOT (t.keys && blocked)
                    ) AS g
                ) AS o
                ORDER BY o.rank, o.aged, o.priority DESC, o.due_at;
        END IF;
        LOOP
            FETCH candidates INTO r;
            EXIT WHEN NOT FOUND;
            r_handler := r.handler_ref;
            r_keys := r.keys;
            IF r_handler IS NULL AND cardinality(limited) > 0 THEN  -- from the ordered cursor
                SELECT t.handler_ref, t.keys INTO r_handler, r_keys
                FROM {schema}.task AS t WHERE t.id = r.id;
            END IF;
            fits := true;
            FOR i IN 1 .. cardinality(limited) LOOP
                IF taken[i] >= budget[i] AND (limited[i] = '*'
                        OR limited[i] = 'handler:' || r_handler OR limited[i] = ANY (r_keys)) THEN
                    fits := false;
                    EXIT;
                END IF;
            END LOOP;
            CONTINUE WHEN NOT fits;
            -- still due and not another claimant's (a fresh look at the row, under its lock)
            PERFORM 1 FROM {schema}.task AS t
            WHERE t.id = r.id AND t.status IN ('PENDING', 'IN_FLIGHT') AND t.due_at <= started
            FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
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
        CLOSE candidates;
        -- what the claim took from gates and buckets (no change of version)
        FOR i IN 1 .. cardinality(limited) LOOP
            CONTINUE WHEN taken[i] = 0;
            UPDATE {schema}.control AS k
            SET gate = k.gate - taken[i],
                bucket_tokens = CASE WHEN k.rate IS NULL THEN k.bucket_tokens
                    ELSE refilled[i] - taken[i] END,
                bucket_at = CASE WHEN k.rate IS NULL THEN k.bucket_at
                    ELSE greatest(started, k.bucket_at) END
            WHERE k.queue = q AND k.key = limited[i];
        END LOOP;
    END IF;
    IF cardinality(chosen) = 0 THEN
        PERFORM {schema}.raise_floor(q);
        RETURN;
    END IF;

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
