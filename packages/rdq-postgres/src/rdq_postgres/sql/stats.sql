-- The stats of the queues $2 (one for stats, every queue for list_queues; see
-- queue_stats.part). The queues come as an array so that the planner expects a few of them.
WITH queues AS (SELECT DISTINCT unnest($2::text[]) AS queue)
{queue_stats}
