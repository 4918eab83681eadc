-- Delete the DEAD tasks of queue $1 among ids $2.
DELETE FROM {schema}.task
WHERE queue = $1 AND status = 'DEAD' AND id = ANY($2::text[])
