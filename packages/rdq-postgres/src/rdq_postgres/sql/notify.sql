-- Announce "a task of these queues (:queues) may be due" to wait_due listeners (LISTEN
-- {channel}). Sent after the commit that made the tasks due, and coalesced: NOTIFY serialises
-- committing transactions on a global lock, so it is kept out of the resolution transactions,
-- and out of an enqueue's unless nothing else is being announced (enqueue.sql, _notify.py).
SELECT pg_notify('{channel}', queue) FROM unnest(:queues::text[]) AS queue
