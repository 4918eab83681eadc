-- The queue holding a task (after an enqueue found its id taken).
SELECT queue FROM {schema}.task WHERE id = :id
