-- Append one audit entry; its id and time (the database clock) come back.
INSERT INTO {schema}.audit (actor, action, queue, selector, count, reason, error)
VALUES (:actor, :action, :queue, :selector::json, :count, :reason, :error)
RETURNING id, time
