-- Delete the DEAD and CANCELLED tasks of :queue among :ids.
DELETE FROM {schema}.task
WHERE queue = :queue AND status IN ('DEAD', 'CANCELLED') AND id = ANY(:ids::text[])
