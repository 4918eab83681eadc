-- A claim in the order a queue's own control asks for (fair shares, priority aging) reads the
-- first tasks of each group, not every due task of the queue.
--
-- task.grp: the task's group when its queue's control '*' sets fair shares (its first key that
-- starts with the fair prefix, '' when none does) or priority aging alone ('' for every task:
-- one group); NULL in every other queue, which pays nothing more than a check at insert.
-- Kept at admission by a trigger (every statement that stores a task keeps it) and rewritten
-- for every task of the queue when its fair prefix or aging is set, changed or removed (a
-- trigger on control: one pass over the queue's tasks, at that change only). A write
-- transaction holds the whole database, so no insert runs beside a rewrite.
--
-- task_group (queue, grp, priority, due_at, id) over those tasks while due or in flight: a
-- claim finds the groups by one seek each, the priorities of a group by one seek each, and
-- reads each group's tasks in claim order from there (rdq_sqlite._claims).

ALTER TABLE task ADD COLUMN grp TEXT;

UPDATE task SET grp = (
    SELECT CASE
        WHEN c.fair IS NULL THEN ''
        WHEN NOT json_valid(task.keys) OR json_type(task.keys) <> 'array' THEN ''
        ELSE coalesce((
            SELECT j.value FROM json_each(task.keys) AS j
            WHERE j.type = 'text' AND substr(j.value, 1, length(c.fair)) = c.fair
            ORDER BY j.key LIMIT 1), '')
    END
    FROM control AS c
    WHERE c.queue = task.queue AND c.key = '*' AND (c.fair IS NOT NULL OR c.aging IS NOT NULL)
)
WHERE queue IN (
    SELECT queue FROM control WHERE key = '*' AND (fair IS NOT NULL OR aging IS NOT NULL)
);

CREATE INDEX task_group ON task (queue, grp, priority, due_at, id)
    WHERE grp IS NOT NULL AND due_at IS NOT NULL;

CREATE TRIGGER task_group AFTER INSERT ON task
WHEN EXISTS (
    SELECT 1 FROM control
    WHERE queue = NEW.queue AND key = '*' AND (fair IS NOT NULL OR aging IS NOT NULL)
)
BEGIN
    UPDATE task SET grp = (
        SELECT CASE
            WHEN c.fair IS NULL THEN ''
            WHEN NOT json_valid(NEW.keys) OR json_type(NEW.keys) <> 'array' THEN ''
            ELSE coalesce((
                SELECT j.value FROM json_each(NEW.keys) AS j
                WHERE j.type = 'text' AND substr(j.value, 1, length(c.fair)) = c.fair
                ORDER BY j.key LIMIT 1), '')
        END
        FROM control AS c WHERE c.queue = NEW.queue AND c.key = '*'
    )
    WHERE id = NEW.id;
END;

CREATE TRIGGER control_group_set AFTER INSERT ON control
WHEN NEW.key = '*' AND (NEW.fair IS NOT NULL OR NEW.aging IS NOT NULL)
BEGIN
    UPDATE task SET grp = CASE
        WHEN NEW.fair IS NULL THEN ''
        WHEN NOT json_valid(task.keys) OR json_type(task.keys) <> 'array' THEN ''
        ELSE coalesce((
            SELECT j.value FROM json_each(task.keys) AS j
            WHERE j.type = 'text' AND substr(j.value, 1, length(NEW.fair)) = NEW.fair
            ORDER BY j.key LIMIT 1), '')
    END
    WHERE queue = NEW.queue;
END;

CREATE TRIGGER control_group_changed AFTER UPDATE OF fair, aging ON control
WHEN NEW.key = '*' AND (OLD.fair IS NOT NEW.fair OR (OLD.aging IS NULL) <> (NEW.aging IS NULL))
BEGIN
    UPDATE task SET grp = CASE
        WHEN NEW.fair IS NULL AND NEW.aging IS NULL THEN NULL
        WHEN NEW.fair IS NULL THEN ''
        WHEN NOT json_valid(task.keys) OR json_type(task.keys) <> 'array' THEN ''
        ELSE coalesce((
            SELECT j.value FROM json_each(task.keys) AS j
            WHERE j.type = 'text' AND substr(j.value, 1, length(NEW.fair)) = NEW.fair
            ORDER BY j.key LIMIT 1), '')
    END
    WHERE queue = NEW.queue;
END;

CREATE TRIGGER control_group_removed AFTER DELETE ON control
WHEN OLD.key = '*' AND (OLD.fair IS NOT NULL OR OLD.aging IS NOT NULL)
BEGIN
    UPDATE task SET grp = NULL WHERE queue = OLD.queue AND grp IS NOT NULL;
END;
