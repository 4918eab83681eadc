-- Prototype schema for bench/e2e/split_layout_experiment.py: rdq's one task table split by
-- status into three. Not rdq's schema: evidence for whether the split is worth a migration.
-- Loaded after rdq's own migrations (it calls rdq.append_attempt, rdq.quarantine_add,
-- rdq.task_group, rdq.unrestricted and rdq.id_conflict, and reads rdq.control through them).
--
-- * split.live: the PENDING and IN_FLIGHT tasks only, with today's columns of a live row and
--   the indexes rdq.task has over its live rows (the claim's, the live counts', the fair
--   groups', the payload references'), its constraints and its BEFORE INSERT trigger;
-- * split.succeeded: SUCCEEDED tasks as today keeps them (envelope, counters, attempt
--   history), partitioned by RANGE (completed_at): a TTL purge drops whole partitions. Its
--   indexes stand in for rdq.task's over SUCCEEDED rows: by id (get, and an id submitted again
--   within task_ttl is recognised: no unique index can span partitions, the admission probes
--   it), (queue, completed_at) (counts, listing, a queue's purge), the payload references;
-- * split.dead: the DLQ, a table of its own (rdq.task's DLQ index and the payload
--   references'); present so that admissions and lookups probe it as a real layout would.
--
-- Autovacuum is off on every table of the prototype (as the experiment turns it off on
-- rdq.task): the cleanup each layout leaves is measured by an explicit VACUUM, never by an
-- autovacuum that lands at a random point of a drain.

CREATE SCHEMA split;

CREATE TABLE split.live (
    id               text        PRIMARY KEY,
    queue            text        NOT NULL,
    handler_ref      text        NOT NULL,
    payload          json        NOT NULL DEFAULT 'null',
    headers          json        NOT NULL DEFAULT '{}',
    status           text        NOT NULL CHECK (status IN ('PENDING', 'IN_FLIGHT')),
    attempt_count    integer     NOT NULL DEFAULT 0,
    redrive_count    integer     NOT NULL DEFAULT 0,
    attempts         json        NOT NULL DEFAULT '[]',
    error_type       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    next_attempt_at  timestamptz,
    lease_expires_at timestamptz,
    claimed_at       timestamptz,
    token            text,
    dead_lettered_at timestamptz,
    retry            json,
    format_version   integer     NOT NULL DEFAULT 1,
    extra            json        NOT NULL DEFAULT '{}',
    due_at           timestamptz GENERATED ALWAYS AS (
                         CASE status
                             WHEN 'PENDING' THEN next_attempt_at
                             WHEN 'IN_FLIGHT' THEN lease_expires_at
                         END
                     ) STORED,
    priority         smallint    NOT NULL DEFAULT 0,
    claimed_by       text,
    quarantine       json,
    keys             text[]      NOT NULL DEFAULT '{}',
    grp              text,
    CONSTRAINT live_priority_check CHECK (priority BETWEEN -10 AND 10),
    CONSTRAINT live_counts_check CHECK (attempt_count >= 0 AND redrive_count >= 0),
    CONSTRAINT live_json_check CHECK (
        json_typeof(headers) = 'object'
        AND json_typeof(attempts) = 'array'
        AND json_typeof(extra) = 'object'
        AND (retry IS NULL OR json_typeof(retry) IN ('object', 'null'))
    ),
    CONSTRAINT live_status_time_check CHECK (CASE status
        WHEN 'PENDING' THEN next_attempt_at IS NOT NULL
        WHEN 'IN_FLIGHT' THEN lease_expires_at IS NOT NULL
    END),
    CONSTRAINT live_time_range_check CHECK (
        created_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND next_attempt_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND lease_expires_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND claimed_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND dead_lettered_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
    )
) WITH (autovacuum_enabled = off);

-- rdq.task's indexes over live rows, the same definitions (every row of split.live matches
-- their predicates; kept so that the claim's plan is today's).
CREATE INDEX live_claim_priority_idx ON split.live (priority DESC, queue, due_at)
    WHERE status IN ('PENDING', 'IN_FLIGHT');
CREATE INDEX live_live_idx ON split.live (queue, status, due_at, id)
    WHERE status IN ('PENDING', 'IN_FLIGHT');
CREATE INDEX live_group_idx ON split.live (queue, grp, priority DESC, due_at)
    WHERE grp IS NOT NULL AND status IN ('PENDING', 'IN_FLIGHT');
CREATE INDEX live_payload_ref_idx
    ON split.live ((substring(headers::text FROM '"rdq-payload-ref"\s*:\s*"([^"\\]+)"')))
    WHERE headers::text LIKE '%"rdq-payload-ref"%';

CREATE TRIGGER live_group BEFORE INSERT ON split.live
    FOR EACH ROW EXECUTE FUNCTION rdq.task_group();

-- What today keeps of a SUCCEEDED task (the lease columns, NULL on it, and the status, implied
-- by the table, left out).
CREATE TABLE split.succeeded (
    id               text        NOT NULL,
    queue            text        NOT NULL,
    handler_ref      text        NOT NULL,
    payload          json        NOT NULL,
    headers          json        NOT NULL,
    attempt_count    integer     NOT NULL,
    redrive_count    integer     NOT NULL,
    attempts         json        NOT NULL,
    error_type       text,
    created_at       timestamptz NOT NULL,
    next_attempt_at  timestamptz,
    completed_at     timestamptz NOT NULL,
    dead_lettered_at timestamptz,
    retry            json,
    format_version   integer     NOT NULL,
    extra            json        NOT NULL,
    priority         smallint    NOT NULL,
    quarantine       json,
    keys             text[]      NOT NULL,
    CONSTRAINT succeeded_counts_check CHECK (attempt_count >= 0 AND redrive_count >= 0),
    CONSTRAINT succeeded_json_check CHECK (
        json_typeof(headers) = 'object'
        AND json_typeof(attempts) = 'array'
        AND json_typeof(extra) = 'object'
        AND (retry IS NULL OR json_typeof(retry) IN ('object', 'null'))
    ),
    CONSTRAINT succeeded_time_range_check CHECK (
        created_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND next_attempt_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND completed_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND dead_lettered_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
    )
) PARTITION BY RANGE (completed_at);

CREATE INDEX succeeded_id_idx ON split.succeeded (id);
CREATE INDEX succeeded_queue_idx ON split.succeeded (queue, completed_at);
CREATE INDEX succeeded_payload_ref_idx
    ON split.succeeded ((substring(headers::text FROM '"rdq-payload-ref"\s*:\s*"([^"\\]+)"')))
    WHERE headers::text LIKE '%"rdq-payload-ref"%';

-- The DLQ: what today keeps of a DEAD task.
CREATE TABLE split.dead (
    id               text        PRIMARY KEY,
    queue            text        NOT NULL,
    handler_ref      text        NOT NULL,
    payload          json        NOT NULL,
    headers          json        NOT NULL,
    attempt_count    integer     NOT NULL,
    redrive_count    integer     NOT NULL,
    attempts         json        NOT NULL,
    error_type       text,
    created_at       timestamptz NOT NULL,
    next_attempt_at  timestamptz,
    dead_lettered_at timestamptz NOT NULL,
    retry            json,
    format_version   integer     NOT NULL,
    extra            json        NOT NULL,
    priority         smallint    NOT NULL,
    quarantine       json,
    keys             text[]      NOT NULL
) WITH (autovacuum_enabled = off);

CREATE INDEX dead_dlq_idx ON split.dead (queue, dead_lettered_at, id);
CREATE INDEX dead_payload_ref_idx
    ON split.dead ((substring(headers::text FROM '"rdq-payload-ref"\s*:\s*"([^"\\]+)"')))
    WHERE headers::text LIKE '%"rdq-payload-ref"%';

-- The name of the partition of split.succeeded starting at lo (schema-qualified).
CREATE FUNCTION split.partition_name(lo timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT 'split.' || quote_ident('succeeded_' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS'))
$$;

-- The partition of split.succeeded for completed_at in [lo, hi), made if there is none (a
-- real layout makes them ahead, from its maintenance); returns its name.
CREATE FUNCTION split.create_partition(lo timestamptz, hi timestamptz) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    name text := split.partition_name(lo);
BEGIN
    EXECUTE format(
        'CREATE TABLE IF NOT EXISTS %s PARTITION OF split.succeeded'
        ' FOR VALUES FROM (%L) TO (%L) WITH (autovacuum_enabled = off)',
        name, lo, hi
    );
    RETURN name;
END
$$;

-- The table holding task_id now (the admission's id_conflict check, as rdq.task_queue()):
-- VOLATILE, so its queries take fresh snapshots.
CREATE FUNCTION split.task_queue(task_id text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN coalesce(
        (SELECT l.queue FROM split.live AS l WHERE l.id = task_id),
        (SELECT s.queue FROM split.succeeded AS s WHERE s.id = task_id LIMIT 1),
        (SELECT d.queue FROM split.dead AS d WHERE d.id = task_id)
    );
END
$$;

-- The completion of a batch (complete_many.sql): one statement, in a function planned once per
-- connection with claim_due()'s planner settings (migration 0009), as a real layout would
-- have it: split.live is small and churning, so it is analyzed while nearly empty (here
-- before every round), and a plain statement's plan found each task of the batch by a walk of
-- a live index (40-65 ms a completion of 100 at 20,000 live tasks, against ~2 ms by key).
CREATE FUNCTION split.complete_many(
    p_ids text[], p_tokens text[], p_attempts json[], p_error_types text[]
) RETURNS TABLE (done text[], found text[])
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $$
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT *
        FROM unnest(p_ids, p_tokens, p_attempts, p_error_types)
            AS i(id, token, attempt, error_type)
    ),
    released AS (
        DELETE FROM split.live AS t
        USING input AS i
        -- status compared as an expression, not a column: split.live is analyzed near empty,
        -- and with status indexable the plan walked live_live_idx's IN_FLIGHT range for each
        -- id (148 buffers a task) instead of reading the primary key
        WHERE t.id = i.id AND t.token = i.token AND t.status || '' = 'IN_FLIGHT'
        RETURNING t.id, t.queue, t.handler_ref, t.payload, t.headers, t.attempt_count,
                  t.redrive_count, t.attempts, t.created_at, t.next_attempt_at, t.dead_lettered_at,
                  t.retry, t.format_version, t.extra, t.priority, t.quarantine, t.keys,
                  i.attempt, i.error_type
    ),
    moved AS (
        INSERT INTO split.succeeded (
            id, queue, handler_ref, payload, headers, attempt_count, redrive_count, attempts,
            error_type, created_at, next_attempt_at, completed_at, dead_lettered_at, retry,
            format_version, extra, priority, quarantine, keys
        )
        SELECT r.id, r.queue, r.handler_ref, r.payload, r.headers, r.attempt_count + 1,
               r.redrive_count,
               CASE WHEN json_typeof(r.attempts) = 'array'
                   THEN rdq.append_attempt(r.attempts, r.attempt) ELSE json_build_array(r.attempt) END,
               r.error_type, r.created_at, r.next_attempt_at, now(), r.dead_lettered_at, r.retry,
               r.format_version, r.extra, r.priority,
               CASE WHEN json_typeof(r.attempts) = 'array'
                   THEN r.quarantine ELSE rdq.quarantine_add(r.quarantine, 'attempts', r.attempts) END,
               r.keys
        FROM released AS r
        RETURNING id
    )
    SELECT (SELECT array_agg(id) FROM moved) AS done,
           -- which ids exist is asked only when some item was not completed
           CASE WHEN (SELECT count(*) FROM moved) < cardinality(p_ids) THEN
               (SELECT array_agg(DISTINCT f.id) FROM (
                   SELECT l.id FROM split.live AS l WHERE l.id = ANY(p_ids)
                   UNION ALL
                   SELECT s.id FROM split.succeeded AS s WHERE s.id = ANY(p_ids)
                   UNION ALL
                   SELECT d.id FROM split.dead AS d WHERE d.id = ANY(p_ids)
               ) AS f)
           END AS found;
END
$$;
