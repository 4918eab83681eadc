-- The queue holding task :id (after an enqueue found the id taken).
SELECT queue FROM {schema}.task WHERE id = :id
