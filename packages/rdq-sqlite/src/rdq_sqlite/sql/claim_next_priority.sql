-- The highest priority below :below that holds a claimable task (due or not): one index seek.
SELECT priority FROM task
WHERE queue = :queue AND claim_at IS NOT NULL AND priority < :below
ORDER BY priority DESC
LIMIT 1
