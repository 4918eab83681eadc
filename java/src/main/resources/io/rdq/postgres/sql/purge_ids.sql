-- Delete the DEAD tasks of :queue among :ids.
DELETE FROM {schema}.task
WHERE queue = :queue AND status = 'DEAD' AND id = ANY(:ids::text[])
