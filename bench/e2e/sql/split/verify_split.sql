-- The tasks of :queue in the split layout: how many rows in its three tables, how many ids,
-- and how many of :ids are in split.succeeded once, with one SUCCEEDED attempt record.
WITH rows AS (
    SELECT id, NULL::integer AS attempt_count, NULL::json AS attempts, false AS succeeded
    FROM split.live WHERE queue = :queue
    UNION ALL
    SELECT id, attempt_count, attempts, true FROM split.succeeded WHERE queue = :queue
    UNION ALL
    SELECT id, NULL, NULL, false FROM split.dead WHERE queue = :queue
)
SELECT count(*) AS rows,
       count(DISTINCT id) AS ids,
       count(*) FILTER (
           WHERE succeeded AND id = ANY(:ids::text[]) AND attempt_count = 1
             AND json_array_length(attempts) = 1 AND attempts -> 0 ->> 'outcome' = 'SUCCEEDED'
       ) AS completed
FROM rows
