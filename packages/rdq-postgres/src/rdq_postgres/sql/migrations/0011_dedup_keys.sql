-- rdq schema version 11: dedup keys (contract version 5, capability dedup).
--
-- dedup holds one row per key given to a task: the task that holds it, its queue, and until
-- when (held_until; NULL: while the task is PENDING or IN_FLIGHT). A key whose task is gone is
-- free, and its row goes with the task (ON DELETE CASCADE: purges, retention's expiry and the
-- finished-task TTL need no change). A new table and a new function: a populated database is
-- upgraded in place without touching a task.
--
-- admit_task() admits one task under a key in one transaction: a transaction-scoped advisory
-- lock on the key serializes the admissions of one key (the others wait, then see what the
-- first did: each statement of the function reads with a fresh snapshot), so of concurrent
-- admissions of one key exactly one adds a task. It answers one row (outcome, task_id, queue):
-- added, skipped, replaced or extended, or id_conflict / dedup_conflict for an id or a key held
-- by another queue (the caller raises; nothing was changed). Java calls it too (admit.sql).

CREATE TABLE {schema}.dedup (
    key         text        PRIMARY KEY,
    task_id     text        NOT NULL REFERENCES {schema}.task (id) ON DELETE CASCADE,
    queue       text        NOT NULL,
    held_until  timestamptz
);

CREATE INDEX dedup_task_idx ON {schema}.dedup (task_id);

CREATE FUNCTION {schema}.admit_task(
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
    ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN  -- an enqueue of the same id (which takes no key lock) got there first
        SELECT t.queue INTO v_found FROM {schema}.task AS t WHERE t.id = p_id;
        RETURN QUERY SELECT CASE WHEN v_found = p_queue THEN 'skipped' ELSE 'id_conflict' END,
                            p_id, v_found;
        RETURN;
    END IF;
    INSERT INTO {schema}.dedup AS d (key, task_id, queue, held_until)
    VALUES (p_key, p_id, p_queue, v_now + v_window)
    ON CONFLICT (key) DO UPDATE
        SET task_id = EXCLUDED.task_id, queue = EXCLUDED.queue, held_until = EXCLUDED.held_until;
    RETURN QUERY SELECT 'added'::text, p_id, p_queue;
END
$$;
