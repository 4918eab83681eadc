-- Delete the DEAD and CANCELLED tasks of queue $1 among ids $2.
DELETE FROM {schema}.task
WHERE queue = $1 AND status IN ('DEAD', 'CANCELLED') AND id = ANY($2::text[])
