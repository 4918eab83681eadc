-- The task table, its indexes, the store's clock and the audit trail.
--
-- Times are integers: microseconds since 1970-01-01 UTC. Free-form fields (payload,
-- headers, attempts, retry, fields this release does not know) are JSON text written by
-- msgspec. due_at and status_at are computed from the status and the times, so no statement
-- and no hand edit can let them disagree with the row.

CREATE TABLE task (
    id                TEXT    NOT NULL PRIMARY KEY,
    queue             TEXT    NOT NULL,
    handler_ref       TEXT    NOT NULL,
    status            TEXT    NOT NULL
        CHECK (status IN ('PENDING', 'IN_FLIGHT', 'SUCCEEDED', 'DEAD', 'CANCELLED')),
    priority          INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN -10 AND 10),
    payload           TEXT    NOT NULL DEFAULT 'null',
    headers           TEXT    NOT NULL DEFAULT '{}',
    attempt_count     INTEGER NOT NULL DEFAULT 0,
    redrive_count     INTEGER NOT NULL DEFAULT 0,
    attempts          TEXT    NOT NULL DEFAULT '[]',
    last_error_type   TEXT,
    created_at        INTEGER,
    next_attempt_at   INTEGER,
    lease_expires_at  INTEGER,
    claimed_by        TEXT,
    claimed_at        INTEGER,
    token             TEXT,
    completed_at      INTEGER,
    dead_lettered_at  INTEGER,
    cancelled_at      INTEGER,
    retry             TEXT,
    format_version    INTEGER NOT NULL DEFAULT 1,
    extra             TEXT    NOT NULL DEFAULT '{}',
    -- when a claim may take the task: PENDING at its due time, IN_FLIGHT when its lease lapses
    due_at            INTEGER GENERATED ALWAYS AS (
        CASE status
            WHEN 'PENDING' THEN next_attempt_at
            WHEN 'IN_FLIGHT' THEN lease_expires_at
        END
    ) VIRTUAL,
    -- the time a task is listed by in its status
    status_at         INTEGER GENERATED ALWAYS AS (
        CASE status
            WHEN 'PENDING' THEN next_attempt_at
            WHEN 'IN_FLIGHT' THEN lease_expires_at
            WHEN 'SUCCEEDED' THEN completed_at
            WHEN 'DEAD' THEN dead_lettered_at
            ELSE cancelled_at
        END
    ) VIRTUAL
) STRICT;

-- The claim: per queue and priority, the due tasks oldest first. Only claimable tasks are in it.
CREATE INDEX task_claim ON task (queue, priority, due_at, id) WHERE due_at IS NOT NULL;

-- Listing by status (DLQ pages, task pages), counts per status, the TTL purge.
CREATE INDEX task_status ON task (queue, status, status_at, id);

-- One row: the latest time this database has handed out (see docs/sqlite.md, "The clock").
CREATE TABLE clock (
    one     INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    now_us  INTEGER NOT NULL
) STRICT;
INSERT INTO clock (one, now_us) VALUES (1, 0);

CREATE TABLE audit (
    seq       INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    time      INTEGER NOT NULL,
    actor     TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    queue     TEXT    NOT NULL,
    selector  TEXT    NOT NULL DEFAULT '{}',
    count     INTEGER NOT NULL DEFAULT 0,
    reason    TEXT,
    error     TEXT
) STRICT;

CREATE INDEX audit_time ON audit (time, seq);
