-- The queue of every listed id that exists.
SELECT id, queue FROM task WHERE id IN (SELECT value FROM json_each(:ids))
