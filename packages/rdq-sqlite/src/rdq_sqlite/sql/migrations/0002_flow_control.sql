-- Contract version 3: every task's flow-control keys, the control records claims honour, the
-- worker registry and per-minute counts. Upgrades a populated file in place: existing tasks get
-- no keys ('[]') and are not held; the claim index is rebuilt on claim_at.

-- Envelope.keys as stored (a JSON array of strings; '[]' for most tasks).
ALTER TABLE task ADD COLUMN keys TEXT NOT NULL DEFAULT '[]';

-- The key a claim found holding the task back (a paused handler, a full concurrency limit, …),
-- or NULL. A held task leaves the claim index for task_held, so a deep backlog held back by a
-- control is looked at once, not by every claim. Every statement that changes when a task is
-- due (a claim, extend_lease, reschedule, redrive, retry_now) clears it; deleting the control,
-- or lifting every limit it sets, releases the tasks held under its key.
ALTER TABLE task ADD COLUMN held TEXT;

-- When a claim may take the task through the claim index: its due time unless it is held.
ALTER TABLE task ADD COLUMN claim_at INTEGER GENERATED ALWAYS AS (
    CASE WHEN held IS NULL THEN due_at END
) VIRTUAL;

-- The claim: per queue and priority, the claimable tasks oldest due first (was on due_at).
DROP INDEX task_claim;
CREATE INDEX task_claim ON task (queue, priority, claim_at, id) WHERE claim_at IS NOT NULL;

-- The held tasks of a queue per key, in claim order: a claim reads those of a key that lets
-- tasks through again. Tasks that were never held (nearly all) are not in it.
CREATE INDEX task_held ON task (queue, held, priority, due_at, id)
    WHERE held IS NOT NULL AND due_at IS NOT NULL;

-- One control record per (queue, key). tokens/tokens_at: the rate bucket (tokens as of
-- tokens_at, microseconds); NULL when there is none yet (a new or changed rate: full).
CREATE TABLE control (
    queue        TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    paused       INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    gate         INTEGER,
    concurrency  INTEGER,
    rate         INTEGER,
    per          REAL    NOT NULL DEFAULT 1.0,
    burst        INTEGER,
    state        TEXT    NOT NULL DEFAULT '{}',
    version      INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    tokens       REAL,
    tokens_at    INTEGER,
    PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;

-- The worker registry: one row per worker id (queues and extra are JSON).
CREATE TABLE worker (
    id           TEXT    NOT NULL PRIMARY KEY,
    host         TEXT    NOT NULL DEFAULT '',
    pid          INTEGER NOT NULL DEFAULT 0,
    version      TEXT    NOT NULL DEFAULT '',
    queues       TEXT    NOT NULL DEFAULT '[]',
    concurrency  INTEGER NOT NULL DEFAULT 0,
    held         INTEGER NOT NULL DEFAULT 0,
    state        TEXT    NOT NULL DEFAULT 'running',
    heartbeat    REAL    NOT NULL DEFAULT 10.0,
    started_at   INTEGER NOT NULL,
    seen_at      INTEGER NOT NULL,
    extra        TEXT    NOT NULL DEFAULT '{}'
) STRICT;

-- Attempts ended per queue and minute (minute: microseconds of the minute's start, UTC).
CREATE TABLE counts (
    queue      TEXT    NOT NULL,
    minute     INTEGER NOT NULL,
    succeeded  INTEGER NOT NULL DEFAULT 0,
    failed     INTEGER NOT NULL DEFAULT 0,
    dead       INTEGER NOT NULL DEFAULT 0,
    deferred   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
) STRICT, WITHOUT ROWID;

CREATE INDEX counts_minute ON counts (minute);
