-- Delete the DEAD tasks of :queue that match the filter.
DELETE FROM {schema}.task
WHERE queue = :queue AND status = 'DEAD'
  {dlq_filter}
