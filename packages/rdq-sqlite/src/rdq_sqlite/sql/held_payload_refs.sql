-- The references among :refs that some task carries (from the index of migration 5).
SELECT DISTINCT (CASE WHEN json_valid(headers) THEN json_extract(headers, '$."rdq-payload-ref"') END) AS ref
FROM task
WHERE (CASE WHEN json_valid(headers) THEN json_extract(headers, '$."rdq-payload-ref"') END) IN (SELECT value FROM json_each(:refs))
    AND (CASE WHEN json_valid(headers) THEN json_extract(headers, '$."rdq-payload-ref"') END) IS NOT NULL
