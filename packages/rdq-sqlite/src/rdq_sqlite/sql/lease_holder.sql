-- The task :id held with :token (IN_FLIGHT, the token current): its queue, lease end, handler
-- and keys, which an extension of its lease checks against the queue's concurrency limits
-- when the lease has lapsed.
SELECT queue, lease_expires_at, handler_ref, keys FROM task
WHERE id = :id AND status = 'IN_FLIGHT' AND token = :token
