-- The queue holding task $1 (after an enqueue found the id taken).
SELECT queue FROM {schema}.task WHERE id = $1
