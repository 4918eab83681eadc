-- The references among :refs that some task carries (task_payload_ref_idx, migration 0012: the
-- same expression, read from the headers' text).
SELECT DISTINCT substring(headers::text FROM '"rdq-payload-ref"\s*:\s*"([^"\\]+)"') AS ref
FROM {schema}.task
WHERE headers::text LIKE '%"rdq-payload-ref"%'
    AND substring(headers::text FROM '"rdq-payload-ref"\s*:\s*"([^"\\]+)"') = ANY (:refs::text[])
