-- rdq schema version 1: one row per task.
--
-- {schema} is replaced by the configured schema (quoted identifier, default "rdq").
-- See docs/postgres-schema.md for the meaning of every column and the SQL a worker in any
-- language uses to claim and resolve tasks.

CREATE TABLE {schema}.task (
    id               text        PRIMARY KEY,
    queue            text        NOT NULL,
    handler_ref      text        NOT NULL,
    payload          json        NOT NULL DEFAULT 'null',
    headers          json        NOT NULL DEFAULT '{}',
    status           text        NOT NULL
                     CHECK (status IN ('PENDING', 'IN_FLIGHT', 'SUCCEEDED', 'DEAD')),
    attempt_count    integer     NOT NULL DEFAULT 0,
    redrive_count    integer     NOT NULL DEFAULT 0,
    attempts         json        NOT NULL DEFAULT '[]',
    error_type       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    next_attempt_at  timestamptz,
    lease_expires_at timestamptz,
    claimed_at       timestamptz,
    token            text,
    completed_at     timestamptz,
    dead_lettered_at timestamptz,
    retry            json,
    format_version   integer     NOT NULL DEFAULT 1,
    extra            json        NOT NULL DEFAULT '{}',
    -- When the task next needs a claimant: the retry time of a PENDING task, the lease end of
    -- an IN_FLIGHT one. One column, so the claim is a single index range scan.
    due_at           timestamptz GENERATED ALWAYS AS (
                         CASE status
                             WHEN 'PENDING' THEN next_attempt_at
                             WHEN 'IN_FLIGHT' THEN lease_expires_at
                         END
                     ) STORED
);

-- The claim scan: due tasks of a queue, oldest first, one index range. status is included so
-- stats can count PENDING and IN_FLIGHT tasks from the index alone.
CREATE INDEX task_claim_idx ON {schema}.task (queue, due_at) INCLUDE (status)
    WHERE status IN ('PENDING', 'IN_FLIGHT');

-- DLQ keyset pagination by (dead_lettered_at, id).
CREATE INDEX task_dlq_idx ON {schema}.task (queue, dead_lettered_at, id)
    WHERE status = 'DEAD';

-- purge_succeeded and the SUCCEEDED count.
CREATE INDEX task_succeeded_idx ON {schema}.task (queue, completed_at)
    WHERE status = 'SUCCEEDED';

-- Attempt records are a JSON array (json, not jsonb: json keeps the text exactly as written,
-- including \u0000 escapes that jsonb and text refuse). Appending works on the text.
CREATE FUNCTION {schema}.append_attempt(attempts json, attempt json) RETURNS json
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (CASE
        WHEN btrim(attempts::text, E' \t\r\n') = '[]' THEN '[' || attempt::text || ']'
        ELSE left(rtrim(attempts::text, E' \t\r\n'), -1) || ',' || attempt::text || ']'
    END)::json
$$;

-- Timestamps inside attempt records: RFC 3339 in UTC with microseconds.
CREATE FUNCTION {schema}.rfc3339(at timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;
