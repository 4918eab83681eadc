-- rdq schema version 5: flow control, the fleet and counts (storage contract version 3).
--
-- * task.keys: a task's flow-control keys beyond its queue's ('*') and its handler's
--   ('handler:<handler_ref>'), and an index of the keys of IN_FLIGHT tasks that have any, for
--   counting the live leases of a key;
-- * control: one record per (queue, key) that claims honour — a pause, a gate, a concurrency
--   limit, a rate limit with its token bucket — and state of the engine's own;
-- * unrestricted(queue): claim.sql's check that no control restricts the queue (it raises
--   SQLSTATE RQ423 for one that does);
-- * live_leases(queue, key): how many tasks with the key hold a live lease now;
-- * claim_controlled(...): the claim of a queue that has controls (claim_controlled.sql, for
--   a queue claim.sql refuses; every other claim runs as before);
-- * worker: the worker registry; counts: attempts ended per queue and minute.
--
-- Every step adds: a column with a constant default is recorded in the catalog (no table
-- rewrite); the one index on task holds only IN_FLIGHT tasks with keys, of which a populated
-- table upgraded in place has none. See docs/postgres-schema.md.

ALTER TABLE {schema}.task ADD COLUMN keys text[] NOT NULL DEFAULT '{}';

-- The live leases of a task key: only IN_FLIGHT tasks that have keys are in it, so tasks
-- without keys (and every PENDING one) cost nothing to keep it.
CREATE INDEX task_in_flight_keys_idx ON {schema}.task USING gin (keys)
    WHERE status = 'IN_FLIGHT' AND keys <> '{}';

-- Control records: written only by compare-and-set on version; gate, bucket_tokens and
-- bucket_at are also changed by claims (without a change of version). Ordered bytewise
-- (COLLATE "C"), which is how the contract lists them and how claims lock them.
CREATE TABLE {schema}.control (
    queue         text             COLLATE "C" NOT NULL,
    key           text             COLLATE "C" NOT NULL,
    paused        boolean          NOT NULL DEFAULT false,
    gate          bigint           CHECK (gate >= 0),
    concurrency   bigint           CHECK (concurrency >= 0),
    rate          bigint           CHECK (rate >= 1),
    per           double precision NOT NULL DEFAULT 1 CHECK (per > 0),
    burst         bigint           CHECK (burst >= 1),
    state         json             NOT NULL DEFAULT '{}',
    version       bigint           NOT NULL CHECK (version >= 1),
    updated_at    timestamptz      NOT NULL DEFAULT now(),
    -- the rate limit's bucket: its tokens as of bucket_at; NULL: full (a new or changed rate)
    bucket_tokens double precision,
    bucket_at     timestamptz,
    PRIMARY KEY (queue, key)
);

-- Does a control restrict the claims of a queue? (claim.sql asks at every claim: one probe.)
CREATE INDEX control_restricting_idx ON {schema}.control (queue)
    WHERE paused OR gate IS NOT NULL OR concurrency IS NOT NULL OR rate IS NOT NULL;

-- True when no control restricts the claims of queue q (none paused, no gate, no limit; a
-- control holding only state restricts nothing); else it raises SQLSTATE RQ423, DETAIL
-- {"queue": q}: such a queue is claimed with claim_controlled(). claim.sql's one-time filter,
-- evaluated before its scan: a function call to plan and one index probe to run.
CREATE FUNCTION {schema}.unrestricted(q text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF EXISTS (
        SELECT FROM {schema}.control AS c
        WHERE c.queue = q
          AND (c.paused OR c.gate IS NOT NULL OR c.concurrency IS NOT NULL OR c.rate IS NOT NULL)
    ) THEN
        RAISE EXCEPTION 'queue % has controls: claim it with claim_controlled()', q
            USING ERRCODE = 'RQ423', DETAIL = json_build_object('queue', q)::text;
    END IF;
    RETURN true;
END
$$;

-- How many tasks of queue q with key k hold a live lease (IN_FLIGHT, lease_expires_at after
-- now()): '*' every task of the queue, 'handler:<ref>' those of that handler, any other key
-- those whose keys hold it.
CREATE FUNCTION {schema}.live_leases(q text, k text) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN k = '*' THEN (
            SELECT count(*) FROM {schema}.task AS t
            WHERE t.queue = q AND t.status = 'IN_FLIGHT' AND t.due_at > now())
        WHEN left(k, 8) = 'handler:' THEN (
            SELECT count(*) FROM {schema}.task AS t
            WHERE t.queue = q AND t.status = 'IN_FLIGHT' AND t.due_at > now()
              AND t.handler_ref = substr(k, 9))
        ELSE (
            SELECT count(*) FROM {schema}.task AS t
            WHERE t.status = 'IN_FLIGHT' AND t.keys <> '{}' AND t.keys @> ARRAY[k]
              AND t.queue = q AND t.due_at > now())
    END
$$;

-- The claim of queue q when a control restricts it: up to n due tasks, highest priority first
-- and oldest due first within one, each taken only when every control of its keys ('*',
-- 'handler:<ref>', keys) lets it through — not paused; a gate of at least 1, less one per task
-- taken; fewer live leases with the key than its concurrency; a token in its rate bucket
-- (refilled at rate/per per second of now(), at most burst, default max(1, rate / 10)). A
-- task held back is skipped, never waited on. Leased for lease_us microseconds to worker.
--
-- The controls that limit (gate, concurrency, rate) are locked in key order first, so the
-- claims of one queue take their slots one after the other; each later query of this VOLATILE
-- function reads with a snapshot of its own, taken after those locks, so it counts the leases
-- of the claim before it. What it takes from gates and buckets is written back without a
-- change of version. The lease and the LEASE_EXPIRED record are claim.sql's (keep the two in
-- step).
CREATE FUNCTION {schema}.claim_controlled(q text, n bigint, lease_us bigint, worker text)
RETURNS TABLE (claimed {schema}.task, claimed_due_at timestamptz)
LANGUAGE plpgsql VOLATILE
-- plan the cursor below for its first rows: a claim reads a handful of them
SET cursor_tuple_fraction = 0.001
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

    -- The due tasks none of whose keys is blocked, in claim order: with no key limited, the
    -- first n of them that no other claimant holds; else each one whose limited keys all have
    -- room left (the others are skipped).
    IF cardinality(limited) = 0 THEN
        FOR r IN
            SELECT t.id, t.due_at
            FROM {schema}.task AS t
            WHERE t.priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
              AND t.queue = q
              AND t.status IN ('PENDING', 'IN_FLIGHT')
              AND t.due_at <= started
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
        OPEN candidates FOR
            SELECT t.id, t.handler_ref, t.keys, t.due_at
            FROM {schema}.task AS t
            WHERE t.priority = ANY ('{10,9,8,7,6,5,4,3,2,1,0,-1,-2,-3,-4,-5,-6,-7,-8,-9,-10}'::smallint[])
              AND t.queue = q
              AND t.status IN ('PENDING', 'IN_FLIGHT')
              AND t.due_at <= started
              AND NOT (('handler:' || t.handler_ref) = ANY (blocked))
              AND NOT (t.keys && blocked)
            ORDER BY t.priority DESC, t.due_at;
        LOOP
            FETCH candidates INTO r;
            EXIT WHEN NOT FOUND;
            fits := true;
            FOR i IN 1 .. cardinality(limited) LOOP
                IF taken[i] >= budget[i] AND (limited[i] = '*'
                        OR limited[i] = 'handler:' || r.handler_ref OR limited[i] = ANY (r.keys)) THEN
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
                IF limited[i] = '*' OR limited[i] = 'handler:' || r.handler_ref
                        OR limited[i] = ANY (r.keys) THEN
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
        FROM unnest(chosen, dues) AS d(id, due_at)
        WHERE t.id = d.id
        RETURNING t, d.due_at
    )
    SELECT * FROM leased;
END
$$;

-- The worker registry: one row per worker id, seen_at refreshed by every heartbeat.
CREATE TABLE {schema}.worker (
    id          text             COLLATE "C" PRIMARY KEY,
    host        text             NOT NULL DEFAULT '',
    pid         bigint           NOT NULL DEFAULT 0,
    version     text             NOT NULL DEFAULT '',
    queues      text[]           NOT NULL DEFAULT '{}',
    concurrency bigint           NOT NULL DEFAULT 0,
    held        bigint           NOT NULL DEFAULT 0,
    state       text             NOT NULL DEFAULT 'running',
    heartbeat   double precision NOT NULL DEFAULT 10,
    extra       json             NOT NULL DEFAULT '{}',
    started_at  timestamptz      NOT NULL DEFAULT now(),
    seen_at     timestamptz      NOT NULL DEFAULT now()
);

-- Attempts ended per queue and minute (store time, whole minutes), added to atomically.
CREATE TABLE {schema}.counts (
    queue     text        COLLATE "C" NOT NULL,
    minute    timestamptz NOT NULL,
    succeeded bigint      NOT NULL DEFAULT 0,
    failed    bigint      NOT NULL DEFAULT 0,
    dead      bigint      NOT NULL DEFAULT 0,
    deferred  bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
);

-- read_counts of every queue and purge_counts: by minute.
CREATE INDEX counts_minute_idx ON {schema}.counts (minute);
