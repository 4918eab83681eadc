-- Raise the lease floor of :queue (migration 0017): where a count of its live leases starts.
-- Run in a transaction of its own (autocommit), at most once a second per queue, after a
-- claim of a queue a control restricts: the queue's lease writers wait for its commit.
SELECT {schema}.raise_lease_floor(:queue)
