-- rdq schema version 3: the storage contract's second revision.
--
-- * task priorities (-10..10, higher claimed first) and the index that claims by them;
-- * the claim holder (claimed_by) and cancelled tasks (status CANCELLED, cancelled_at);
-- * indexes for listing every status and for counting a queue's tasks;
-- * CHECK constraints that refuse, at write time, the values no reader can use; values that
--   an earlier schema let in are moved to the new column `quarantine` first;
-- * the audit trail table;
-- * estimated_count(), which stats use above the exact-count threshold.
--
-- See docs/postgres-schema.md for every column, constraint and index.

ALTER TABLE {schema}.task
    ADD COLUMN priority     smallint    NOT NULL DEFAULT 0,
    ADD COLUMN claimed_by   text,
    ADD COLUMN cancelled_at timestamptz,
    -- Raw values that could not stay in their column: an object {"<column>": <raw value>}.
    ADD COLUMN quarantine   json;

-- quarantine with a column's raw value added ({"<column>": <raw value>, ...}, compact, the
-- value's text unchanged); unchanged when value is NULL. The migration below, the
-- resolutions and the reclaim use it.
CREATE FUNCTION {schema}.quarantine_add(quarantine json, name text, value json) RETURNS json
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN value IS NULL THEN quarantine
        WHEN quarantine IS NULL OR btrim(quarantine::text, E' \t\r\n') = '{}'
            THEN ('{' || to_json(name)::text || ':' || value::text || '}')::json
        ELSE (left(rtrim(quarantine::text, E' \t\r\n'), -1) || ',' || to_json(name)::text
              || ':' || value::text || '}')::json
    END
$$;

-- Rows written by hand or by a foreign producer before this version that the constraints
-- below would refuse, repaired in one pass over the table: a JSON value of the wrong type is
-- kept, raw, in quarantine and the column's default put in its place (such a task then reads
-- as corrupt); a missing status time becomes the best time known; a negative counter 0.
UPDATE {schema}.task
SET quarantine = {schema}.quarantine_add({schema}.quarantine_add({schema}.quarantine_add(
        {schema}.quarantine_add(quarantine,
            'headers', CASE WHEN json_typeof(headers) <> 'object' THEN headers END),
            'attempts', CASE WHEN json_typeof(attempts) <> 'array' THEN attempts END),
            'extra', CASE WHEN json_typeof(extra) <> 'object' THEN extra END),
            'retry', CASE WHEN json_typeof(retry) NOT IN ('object', 'null') THEN retry END),
    headers = CASE WHEN json_typeof(headers) <> 'object' THEN '{}' ELSE headers END,
    attempts = CASE WHEN json_typeof(attempts) <> 'array' THEN '[]' ELSE attempts END,
    extra = CASE WHEN json_typeof(extra) <> 'object' THEN '{}' ELSE extra END,
    retry = CASE WHEN json_typeof(retry) NOT IN ('object', 'null') THEN NULL ELSE retry END,
    next_attempt_at = CASE WHEN status = 'PENDING'
        THEN COALESCE(next_attempt_at, created_at) ELSE next_attempt_at END,
    lease_expires_at = CASE WHEN status = 'IN_FLIGHT'
        THEN COALESCE(lease_expires_at, claimed_at, created_at) ELSE lease_expires_at END,
    completed_at = CASE WHEN status = 'SUCCEEDED'
        THEN COALESCE(completed_at, created_at) ELSE completed_at END,
    dead_lettered_at = CASE WHEN status = 'DEAD'
        THEN COALESCE(dead_lettered_at, created_at) ELSE dead_lettered_at END,
    attempt_count = greatest(attempt_count, 0),
    redrive_count = greatest(redrive_count, 0)
WHERE json_typeof(headers) <> 'object'
   OR json_typeof(attempts) <> 'array'
   OR json_typeof(extra) <> 'object'
   OR json_typeof(retry) NOT IN ('object', 'null')
   OR (status = 'PENDING' AND next_attempt_at IS NULL)
   OR (status = 'IN_FLIGHT' AND lease_expires_at IS NULL)
   OR (status = 'SUCCEEDED' AND completed_at IS NULL)
   OR (status = 'DEAD' AND dead_lettered_at IS NULL)
   OR attempt_count < 0
   OR redrive_count < 0;

ALTER TABLE {schema}.task
    DROP CONSTRAINT task_status_check,
    ADD CONSTRAINT task_status_check
        CHECK (status IN ('PENDING', 'IN_FLIGHT', 'SUCCEEDED', 'DEAD', 'CANCELLED')),
    ADD CONSTRAINT task_priority_check CHECK (priority BETWEEN -10 AND 10),
    ADD CONSTRAINT task_counts_check CHECK (attempt_count >= 0 AND redrive_count >= 0),
    ADD CONSTRAINT task_json_check CHECK (
        json_typeof(headers) = 'object'
        AND json_typeof(attempts) = 'array'
        AND json_typeof(extra) = 'object'
        AND (retry IS NULL OR json_typeof(retry) IN ('object', 'null'))
    ),
    -- Every status has the time it is listed (and paged) by.
    ADD CONSTRAINT task_status_time_check CHECK (CASE status
        WHEN 'PENDING' THEN next_attempt_at IS NOT NULL
        WHEN 'IN_FLIGHT' THEN lease_expires_at IS NOT NULL
        WHEN 'SUCCEEDED' THEN completed_at IS NOT NULL
        WHEN 'DEAD' THEN dead_lettered_at IS NOT NULL
        WHEN 'CANCELLED' THEN cancelled_at IS NOT NULL
    END);

-- The claim: due tasks of a queue, highest priority first, oldest due first within one.
-- Priority leads so that `priority = ANY (every priority)` makes one index scan that descends
-- once per priority and reads only due entries of each (on PostgreSQL < 17 an array condition
-- keeps the index order only on the first column): tasks delayed far into the future are
-- never read, whatever their priority.
CREATE INDEX task_claim_priority_idx ON {schema}.task (priority DESC, queue, due_at)
    WHERE status IN ('PENDING', 'IN_FLIGHT');

-- Live tasks by queue and status, in status time order (due_at is next_attempt_at for PENDING
-- and lease_expires_at for IN_FLIGHT): list_tasks of those two statuses, their counts, the
-- oldest due task, wait_due's next due time and the queue list.
CREATE INDEX task_live_idx ON {schema}.task (queue, status, due_at, id)
    WHERE status IN ('PENDING', 'IN_FLIGHT');

-- The claim index of versions 1-2 (oldest due first, no priority): replaced by the two above.
DROP INDEX {schema}.task_claim_idx;

-- list_tasks of CANCELLED tasks, their count and purge_succeeded.
CREATE INDEX task_cancelled_idx ON {schema}.task (queue, cancelled_at, id)
    WHERE status = 'CANCELLED';

-- Joint statistics of (queue, status): estimated_count() reads them through the planner.
CREATE STATISTICS {schema}.task_queue_status (mcv) ON queue, status FROM {schema}.task;

-- How many tasks of queue q are in status s, as the planner estimates it (no table scan).
CREATE FUNCTION {schema}.estimated_count(q text, s text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    plan json;
BEGIN
    EXECUTE format(
        'EXPLAIN (FORMAT JSON) SELECT 1 FROM %s.task WHERE queue = %L AND status = %L',
        '{schema}', q, s
    ) INTO plan;
    RETURN (plan -> 0 -> 'Plan' ->> 'Plan Rows')::bigint;
END
$$;

-- The audit trail: one row per operator action, never changed.
-- Ids are random UUIDs compared bytewise (COLLATE "C"), which is how the contract orders
-- entries of the same time.
CREATE TABLE {schema}.audit (
    id       text        COLLATE "C" PRIMARY KEY DEFAULT gen_random_uuid()::text,
    time     timestamptz NOT NULL DEFAULT now(),
    actor    text        NOT NULL,
    action   text        NOT NULL,
    queue    text        NOT NULL,
    selector json        NOT NULL DEFAULT '{}',
    count    integer     NOT NULL DEFAULT 0,
    reason   text,
    error    text
);

-- list_audit: newest first.
CREATE INDEX audit_time_idx ON {schema}.audit (time, id);

ANALYZE {schema}.task;
