-- The references among :refs that some task carries (task_payload_ref_idx, migration 0012).
SELECT DISTINCT headers ->> 'rdq-payload-ref' AS ref
FROM {schema}.task
WHERE (headers ->> 'rdq-payload-ref') = ANY (:refs::text[])
    AND (headers ->> 'rdq-payload-ref') IS NOT NULL
