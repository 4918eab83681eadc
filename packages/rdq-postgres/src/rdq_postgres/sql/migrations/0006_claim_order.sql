-- rdq schema version 6: the claim order (storage contract version 4).
--
-- * control.fair, control.aging: the settings of a queue's own control (key '*') that change
--   the order its claims take due tasks in — fair shares among the groups of its tasks, and
--   priority aging (see rdq.spi.ClaimOrder);
-- * unrestricted(queue) and control_restricting_idx count them as restricting: a queue with
--   either is claimed with claim_controlled(), every other queue with claim.sql as before (the
--   same one index probe);
-- * claim_controlled(...): takes the due tasks in that order, and returns each claim's place
--   in it (claimed_rank) beside claimed_due_at.
--
-- Two columns with no default (NULL: recorded in the catalog, no table rewrite), an index of
-- the control table rebuilt, two functions replaced. See docs/postgres-schema.md.

ALTER TABLE {schema}.control
    ADD COLUMN fair text CHECK (fair <> ''),
    ADD COLUMN aging double precision CHECK (aging > 0);

DROP INDEX {schema}.control_restricting_idx;
CREATE INDEX control_restricting_idx ON {schema}.control (queue)
    WHERE paused OR gate IS NOT NULL OR concurrency IS NOT NULL OR rate IS NOT NULL
        OR fair IS NOT NULL OR aging IS NOT NULL;

-- True when no control restricts the claims of queue q and none changes their order (none
-- paused, no gate, no limit, no fair shares, no aging); else SQLSTATE RQ423 as before.
CREATE OR REPLACE FUNCTION {schema}.unrestricted(q text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF EXISTS (
        SELECT FROM {schema}.control AS c
        WHERE c.queue = q
          AND (c.paused OR c.gate IS NOT NULL OR c.concurrency IS NOT NULL OR c.rate IS NOT NULL
               OR c.fair IS NOT NULL OR c.aging IS NOT NULL)
    ) THEN
        RAISE EXCEPTION 'queue % has controls: claim it with claim_controlled()', q
            USING ERRCODE = 'RQ423', DETAIL = json_build_object('queue', q)::text;
    END IF;
    RETURN true;
END
$$;

-- claim_controlled of migration 0005, and: in the order of the queue's own control (fair,
-- aging) when it sets one, through the cursor (a task a limit holds back is skipped where it
-- stands); claimed_rank, each claim's place in the claim order (1, 2, …).
DROP FUNCTION {schema}.claim_controlled(text, bigint, bigint, text);
CREATE FUNCTION {schema}.claim_controlled(q text, n bigint, lease_us bigint, worker text)
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
END
$$;
