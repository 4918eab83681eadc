-- The tasks of :queue in today's layout: how many rows, how many ids, and how many of :ids
-- are SUCCEEDED once, with one SUCCEEDED attempt record.
SELECT count(*) AS rows,
       count(DISTINCT id) AS ids,
       count(*) FILTER (
           WHERE id = ANY(:ids::text[]) AND status = 'SUCCEEDED' AND attempt_count = 1
             AND json_array_length(attempts) = 1 AND attempts -> 0 ->> 'outcome' = 'SUCCEEDED'
       ) AS completed
FROM rdq.task
WHERE queue = :queue
