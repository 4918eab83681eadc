-- The references among :refs that some task carries (from the index of migration 5).
SELECT DISTINCT json_extract(headers, '$."rdq-payload-ref"') AS ref
FROM task
WHERE json_extract(headers, '$."rdq-payload-ref"') IN (SELECT value FROM json_each(:refs))
    AND json_extract(headers, '$."rdq-payload-ref"') IS NOT NULL
