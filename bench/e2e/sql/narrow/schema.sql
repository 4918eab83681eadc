-- Prototype schemas for bench/e2e/narrow_row_experiment.py: rdq's task row split in two, the
-- lease state a claim and a completion change (a narrow row) apart from what they only read
-- (the envelope). Not rdq's schema: evidence for whether a narrow hot row is worth a migration.
-- Loaded after rdq's own migrations (it calls rdq.append_attempt). Each variant is a schema:
--
-- * narrow: lease + body; a completion appends its attempt record to body.attempts
--   (fillfactor 100: the updated body rarely fits its page, so it is not a HOT update);
-- * narrow_hot: the same with body at fillfactor 50, room for HOT updates of the body;
-- * attempt_rows: lease + body never updated; a completion inserts its attempt record as a row;
-- * delete: the ceiling of a queue that keeps nothing: one narrow row, deleted on completion
--   (what graphile-worker does), no attempt history.

CREATE SCHEMA narrow;
CREATE SCHEMA narrow_hot;
CREATE SCHEMA attempt_rows;
CREATE SCHEMA "delete";

CREATE TABLE narrow.lease (
    id               text        PRIMARY KEY,
    queue            text        NOT NULL,
    priority         smallint    NOT NULL DEFAULT 0 CHECK (priority BETWEEN -10 AND 10),
    status           text        NOT NULL
                     CHECK (status IN ('PENDING', 'IN_FLIGHT', 'SUCCEEDED', 'DEAD', 'CANCELLED')),
    attempt_count    integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    next_attempt_at  timestamptz,
    lease_expires_at timestamptz,
    claimed_at       timestamptz,
    claimed_by       text,
    token            text,
    completed_at     timestamptz,
    due_at           timestamptz GENERATED ALWAYS AS (
                         CASE status
                             WHEN 'PENDING' THEN next_attempt_at
                             WHEN 'IN_FLIGHT' THEN lease_expires_at
                         END
                     ) STORED
);
CREATE INDEX ON narrow.lease (priority DESC, queue, due_at) WHERE status IN ('PENDING', 'IN_FLIGHT');
CREATE INDEX ON narrow.lease (queue, status, due_at, id) WHERE status IN ('PENDING', 'IN_FLIGHT');
CREATE INDEX ON narrow.lease (queue, completed_at) WHERE status = 'SUCCEEDED';

CREATE TABLE narrow.body (
    id             text        PRIMARY KEY,
    handler_ref    text        NOT NULL,
    payload        json        NOT NULL DEFAULT 'null',
    headers        json        NOT NULL DEFAULT '{}',
    attempts       json        NOT NULL DEFAULT '[]',
    created_at     timestamptz NOT NULL DEFAULT now(),
    retry          json,
    format_version integer     NOT NULL DEFAULT 1,
    extra          json        NOT NULL DEFAULT '{}',
    CHECK (json_typeof(headers) = 'object' AND json_typeof(attempts) = 'array'
           AND json_typeof(extra) = 'object')
);

CREATE TABLE narrow_hot.lease (LIKE narrow.lease INCLUDING ALL);
CREATE TABLE narrow_hot.body (LIKE narrow.body INCLUDING ALL) WITH (fillfactor = 50);
CREATE TABLE attempt_rows.lease (LIKE narrow.lease INCLUDING ALL);
CREATE TABLE attempt_rows.body (LIKE narrow.body INCLUDING ALL);
CREATE TABLE attempt_rows.attempt (
    task_id text    NOT NULL,
    number  integer NOT NULL,
    record  json    NOT NULL,
    PRIMARY KEY (task_id, number)
);

CREATE TABLE "delete".job (
    id               text        PRIMARY KEY,
    queue            text        NOT NULL,
    priority         smallint    NOT NULL DEFAULT 0,
    handler_ref      text        NOT NULL,
    payload          json        NOT NULL DEFAULT 'null',
    attempt_count    integer     NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL,
    locked_by        text,
    locked_at        timestamptz,
    token            text
);
CREATE INDEX ON "delete".job (priority DESC, queue, run_at) WHERE locked_at IS NULL;
