-- Contract version 5: dedup keys. One row per key given to a task: the task that holds it,
-- its queue, and until when (microseconds; NULL: while the task is PENDING or IN_FLIGHT). A
-- key whose task is gone is free: the trigger drops a task's rows with it (purge, expiry, the
-- finished-task TTL). A new table: instant on a populated file.
CREATE TABLE dedup (
    key       TEXT    NOT NULL PRIMARY KEY,
    task_id   TEXT    NOT NULL,
    queue     TEXT    NOT NULL,
    until_us  INTEGER
) STRICT, WITHOUT ROWID;

CREATE INDEX dedup_task ON dedup (task_id);

CREATE TRIGGER dedup_gone AFTER DELETE ON task
BEGIN
    DELETE FROM dedup WHERE task_id = OLD.id;
END;
