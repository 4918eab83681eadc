-- Announce "a task of these queues (:queues) may be due" to wait_due listeners (LISTEN
-- {channel}). Sent after the commit that made the tasks due, and coalesced: NOTIFY serialises
-- committing transactions on a global lock, so it is kept out of the enqueue and resolution
-- transactions.
SELECT pg_notify('{channel}', queue) FROM unnest(:queues::text[]) AS queue
