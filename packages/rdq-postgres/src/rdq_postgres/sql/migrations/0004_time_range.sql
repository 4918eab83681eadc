-- rdq schema version 4: times every reader can hold, and the queue of an id as of now.
--
-- * A CHECK constraint that keeps every time of a task within the years 1-9999 (UTC): no
--   client library represents a time outside them (PostgreSQL's own range reaches 294276 AD
--   and 'infinity'). A time outside the range that an earlier schema let in is kept, raw, in
--   quarantine (so the task reads as corrupt) and the nearest time in range put in its place.
-- * task_queue(id): the queue that holds an id, read with a snapshot of its own. The batch
--   admission statements look up the ids their INSERT skipped with it: an id that another
--   transaction committed while the statement waited on it is invisible to the statement's
--   own snapshot, and must still be reported in its queue (IDConflict), not as "present".
--
-- See docs/postgres-schema.md for every column, constraint and function.

-- t, or the nearest time in the years 1-9999 (UTC); NULL stays NULL.
CREATE FUNCTION {schema}.time_in_range(t timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(greatest(t, '0001-01-01 00:00:00+00'::timestamptz),
                 '9999-12-31 23:59:59.999999+00'::timestamptz)
$$;

-- quarantine with column name's raw time added when it lies outside the years 1-9999.
CREATE FUNCTION {schema}.quarantine_time(quarantine json, name text, t timestamptz)
RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT {schema}.quarantine_add(quarantine, name,
        CASE WHEN t IS DISTINCT FROM {schema}.time_in_range(t) THEN to_json(t::text) END)
$$;

UPDATE {schema}.task
SET quarantine = {schema}.quarantine_time({schema}.quarantine_time(
        {schema}.quarantine_time({schema}.quarantine_time({schema}.quarantine_time(
        {schema}.quarantine_time({schema}.quarantine_time(quarantine,
            'created_at', created_at), 'next_attempt_at', next_attempt_at),
            'lease_expires_at', lease_expires_at), 'claimed_at', claimed_at),
            'completed_at', completed_at), 'dead_lettered_at', dead_lettered_at),
            'cancelled_at', cancelled_at),
    created_at = {schema}.time_in_range(created_at),
    next_attempt_at = {schema}.time_in_range(next_attempt_at),
    lease_expires_at = {schema}.time_in_range(lease_expires_at),
    claimed_at = {schema}.time_in_range(claimed_at),
    completed_at = {schema}.time_in_range(completed_at),
    dead_lettered_at = {schema}.time_in_range(dead_lettered_at),
    cancelled_at = {schema}.time_in_range(cancelled_at)
WHERE created_at IS DISTINCT FROM {schema}.time_in_range(created_at)
   OR next_attempt_at IS DISTINCT FROM {schema}.time_in_range(next_attempt_at)
   OR lease_expires_at IS DISTINCT FROM {schema}.time_in_range(lease_expires_at)
   OR claimed_at IS DISTINCT FROM {schema}.time_in_range(claimed_at)
   OR completed_at IS DISTINCT FROM {schema}.time_in_range(completed_at)
   OR dead_lettered_at IS DISTINCT FROM {schema}.time_in_range(dead_lettered_at)
   OR cancelled_at IS DISTINCT FROM {schema}.time_in_range(cancelled_at);

ALTER TABLE {schema}.task
    ADD CONSTRAINT task_time_range_check CHECK (
        created_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND next_attempt_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND lease_expires_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND claimed_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND completed_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND dead_lettered_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
        AND cancelled_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
    );

-- The queue holding task_id now: VOLATILE, so under READ COMMITTED its query takes a fresh
-- snapshot and sees rows committed after the calling statement began (NULL: no such task).
CREATE FUNCTION {schema}.task_queue(task_id text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN (SELECT t.queue FROM {schema}.task AS t WHERE t.id = task_id);
END
$$;
