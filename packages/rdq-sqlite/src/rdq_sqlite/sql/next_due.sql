-- The earliest time a task of the queue that no control held back can be claimed: one index
-- seek per priority.
WITH RECURSIVE priorities(value) AS (
    SELECT -10
    UNION ALL
    SELECT value + 1 FROM priorities WHERE value < 10
)
SELECT min((
    SELECT min(claim_at) FROM task
    WHERE queue = :queue AND priority = priorities.value AND claim_at IS NOT NULL
)) FROM priorities
