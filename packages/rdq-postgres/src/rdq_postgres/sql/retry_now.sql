-- Make the PENDING tasks of :queue among :ids that are not yet due due now (an operator's
-- "retry now"; no attempt is used up). The others are left alone. lower_floor() (migration
-- 0014: the tasks are due), called for each task moved, comes last among the conditions.
UPDATE {schema}.task
SET next_attempt_at = now()
WHERE queue = :queue AND id = ANY (:ids::text[]) AND status = 'PENDING' AND next_attempt_at > now()
  AND {schema}.lower_floor(queue, now()) IS NOT NULL
