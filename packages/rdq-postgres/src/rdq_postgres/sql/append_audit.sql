-- Append one audit entry; its id and time (the database clock) come back.
INSERT INTO {schema}.audit (actor, action, queue, selector, count, reason, error)
VALUES ($1, $2, $3, $4::json, $5, $6, $7)
RETURNING id, time
