-- A claim met many due tasks that the control of :key (a handler's) holds back: it holds all of
-- the queue's due tasks of that handler at once (one pass over the claim index, in SQLite).
UPDATE task SET held = :key
WHERE queue = :queue AND claim_at <= :now AND handler_ref = :handler_ref
