-- complete with discard (keep_succeeded = false): the claimed task is deleted instead of
-- kept SUCCEEDED, fenced on its token as complete.sql is; the trigger dedup_gone drops its
-- dedup key with it, and the payload-reference index its reference.
DELETE FROM task
WHERE id = :id AND status = 'IN_FLIGHT' AND token = :token
RETURNING queue
