SELECT queue, status, count(*) FROM task WHERE queue = :queue GROUP BY queue, status
