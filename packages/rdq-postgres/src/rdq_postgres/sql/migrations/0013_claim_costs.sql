-- rdq schema version 13: limits that cost little until they bind, and fair or aged claims that
-- cost O(groups x batch), not O(due backlog) (storage contract version 4, unchanged: the same
-- claims, in the same order, taken with less work and less waiting).
--
-- Limits:
--
-- * live_leases(queue, key) counts the live leases of the queue (task_live_idx: the queue's
--   IN_FLIGHT tasks with a lease after now()) and picks the key's among them. The count of a
--   task key read task_in_flight_keys_idx, a GIN index that keeps an entry for every lease
--   taken since the last vacuum: after 12,000 claims a count read 12,000 entries and their
--   rows (2.7-8.6 ms) to find 20. The index is dropped: nothing else reads it, and every
--   claim and outcome of a task with keys paid for keeping it.
-- * due_unblocked(...): the strict claim order's due tasks that no blocked key holds back,
--   planned as claim_due() is;
-- * claim_controlled(...) no longer makes every claim of a limited queue wait for the one
--   before it to commit. It looks at the limiting controls first without a lock, then locks
--   each in key order, as before, but in the mode its state needs:
--     - a control that lets nothing through (paused, every slot taken) is locked FOR SHARE:
--       the claim takes nothing of it, so claims that find it full do not queue behind each
--       other;
--     - a concurrency limit with ample room — at least STRIPES x SPAN free slots, for a
--       claim of at most SPAN tasks — is locked FOR SHARE, and the claim takes one of
--       STRIPES advisory locks of the key (pg_try_advisory_xact_lock, never waited on;
--       none free: the exact way below). Such claims run side by side. Each counts the live
--       leases after its locks, so it sees every claim that committed before; the ones it
--       cannot see are running beside it, each holding another stripe, so at most
--       STRIPES - 1 of them, each taking at most SPAN: a claim takes at most
--       least(SPAN, free - (STRIPES - 1) x SPAN), and the limit is never exceeded;
--     - every other limiting control (a gate, a rate, a concurrency limit near its use) is
--       locked FOR UPDATE, as before: such claims, extensions of lapsed leases (slots_free)
--       and writes of the control take it one after the other, and FOR UPDATE waits for the
--       claims holding it FOR SHARE.
--   The due tasks are read by statements rather than row by row: the first ones in claim
--   order that no blocked key holds back, locked FOR UPDATE SKIP LOCKED; a key whose budget
--   runs out while they are taken is added to the blocked keys and the rest is read again
--   with it (at most once per limited key).
--
-- Fair shares and priority aging:
-- * task.grp: a task's group under its queue's fair shares (its first key starting with the
--   queue's fair prefix, '' when none does), kept at admission; NULL in a queue that is not
--   fair. Set by a trigger on every insert (so every statement that stores a task, in any
--   binding, keeps it), and rewritten for every task of the queue when the queue's fair
--   prefix is set, changed or removed (a trigger on control). The two take one advisory lock
--   of the queue, shared by inserts, exclusive for the rewrite: a task stored while the prefix
--   changes is either grouped by the new prefix or rewritten after its insert committed.
-- * task_group_idx (queue, grp, priority DESC, due_at) over the live tasks of fair queues
--   only (grp IS NOT NULL): a queue that is not fair pays nothing to keep it.
-- * ordered_candidates(...): the first `depth` due tasks of each group, found by index probes
--   (each group's first tasks of each priority), ranked in the claim order of migration 0006.
--   A fair claim reads its groups (a skip scan of task_group_idx, one probe per group) and
--   at most 21 x depth tasks per group; an aged claim of a queue that is not fair at most
--   21 x depth. claim_controlled() takes its candidates from it, with depth growing (x4)
--   only when tasks it read were taken by other claimants or held back.
--
-- Every function here runs with jit = off: a generic plan is costed for any queue and depth
-- (millions of rows), past jit_above_cost, and compiling it took 2 s of a 10 ms claim.
--
-- One column with no default (no table rewrite), one index dropped, one partial index added
-- (built by reading the table once; the tasks of queues fair already are grouped first, one
-- pass over them), five functions and three triggers added, two functions replaced. See
-- docs/postgres-schema.md.

DROP INDEX IF EXISTS {schema}.task_in_flight_keys_idx;

-- How many tasks of queue q with key k hold a live lease (IN_FLIGHT, lease_expires_at after
-- now()): '*' every task of the queue, 'handler:<ref>' those of that handler, any other key
-- those whose keys hold it. One range of task_live_idx: the queue's live leases.
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
    WHERE t.queue = q COLLATE "default" AND t.status = 'IN_FLIGHT' AND t.due_at > now()
      AND CASE
          WHEN k = '*' THEN true
          WHEN left(k, 8) = 'handler:' THEN t.handler_ref = substr(k, 9) COLLATE "default"
          ELSE k COLLATE "default" = ANY (t.keys)
      END;
    RETURN used;
END
$$;

ALTER TABLE {schema}.task ADD COLUMN grp text;

-- The group of a task with keys ks under fair prefix p: its first key starting with p, or ''.
CREATE FUNCTION {schema}.fair_group(ks text[], p text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN starts_with(ks[1], p) THEN ks[1]
        ELSE coalesce((
            SELECT u.k FROM unnest(ks) WITH ORDINALITY AS u(k, o)
            WHERE starts_with(u.k, p) ORDER BY u.o LIMIT 1), '')
    END
$$;


-- the tasks of queues that are fair already (an upgraded database): one pass over them
UPDATE {schema}.task AS t
SET grp = {schema}.fair_group(t.keys, c.fair)
FROM {schema}.control AS c
WHERE c.key = '*' AND c.fair IS NOT NULL AND t.queue = c.queue COLLATE "default";

CREATE INDEX task_group_idx ON {schema}.task (queue, grp, priority DESC, due_at)
    WHERE grp IS NOT NULL AND status IN ('PENDING', 'IN_FLIGHT');

-- Before a task is stored: its group under its queue's fair prefix (NULL: not fair).
CREATE FUNCTION {schema}.task_group() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    prefix text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1380205895, hashtext(NEW.queue));
    SELECT c.fair INTO prefix FROM {schema}.control AS c
    WHERE c.queue = NEW.queue AND c.key = '*';
    NEW.grp := CASE WHEN prefix IS NULL THEN NULL ELSE {schema}.fair_group(NEW.keys, prefix) END;
    RETURN NEW;
END
$$;

CREATE TRIGGER task_group BEFORE INSERT ON {schema}.task
    FOR EACH ROW EXECUTE FUNCTION {schema}.task_group();

-- After the fair prefix of a queue was set, changed or removed: regroup its tasks.
CREATE FUNCTION {schema}.regroup() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
    prefix text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        q := OLD.queue;
        prefix := NULL;
    ELSE
        q := NEW.queue;
        prefix := NEW.fair;
    END IF;
    -- wait for the inserts of the queue that read the old prefix; later ones read this one
    PERFORM pg_advisory_xact_lock(1380205895, hashtext(q));
    UPDATE {schema}.task AS t
    SET grp = CASE WHEN prefix IS NULL THEN NULL ELSE {schema}.fair_group(t.keys, prefix) END
    WHERE t.queue = q COLLATE "default"
      AND t.grp IS DISTINCT FROM
          CASE WHEN prefix IS NULL THEN NULL ELSE {schema}.fair_group(t.keys, prefix) END;
    RETURN NULL;
END
$$;

CREATE TRIGGER control_fair_set AFTER INSERT ON {schema}.control
    FOR EACH ROW WHEN (NEW.key = '*' AND NEW.fair IS NOT NULL)
    EXECUTE FUNCTION {schema}.regroup();
CREATE TRIGGER control_fair_changed AFTER UPDATE OF fair ON {schema}.control
    FOR EACH ROW WHEN (NEW.key = '*' AND OLD.fair IS DISTINCT FROM NEW.fair)
    EXECUTE FUNCTION {schema}.regroup();
CREATE TRIGGER control_fair_removed AFTER DELETE ON {schema}.control
    FOR EACH ROW WHEN (OLD.key = '*' AND OLD.fair IS NOT NULL)
    EXECUTE FUNCTION {schema}.regroup();

-- The due tasks of queue q (due by `started`) that no key of `blocked` holds back, the first
-- `depth` of each group (fair: by task_group_idx, a group whose own key is blocked skipped
-- whole; else the queue is one group), in the claim order of the queue's control: by rank in
-- the group, then aged due time (due_at less priority x aging_s seconds; NULL without
-- aging), priority, due time. `more`: a group's tasks were cut at `depth` (a deeper read may
-- find more).
CREATE FUNCTION {schema}.ordered_candidates(
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

-- The first `want` due tasks of queue q (due by `started`) in strict claim order that no key
-- of `blocked` holds back, leaving out `passed`, locked FOR UPDATE SKIP LOCKED: claim_due()'s
-- scan with two more filters, planned as claim_due() is (migrations 0007-0009: once per
-- connection, never a sort of the due tasks, whatever the table's statistics say).
CREATE FUNCTION {schema}.due_unblocked(
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
      AND NOT (('handler:' || t.handler_ref) = ANY (blocked))
      AND NOT (t.keys && blocked)
      AND t.id <> ALL (passed)
    ORDER BY t.priority DESC, t.due_at
    LIMIT want
    FOR UPDATE OF t SKIP LOCKED;
END
$$;

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
END
$$;
