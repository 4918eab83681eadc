-- Delete the DEAD tasks of queue $1 matching filters $2-$5.
DELETE FROM {schema}.task
WHERE queue = $1 AND status = 'DEAD'
  AND ($2::text IS NULL OR error_type = $2)
  AND ($3::text IS NULL OR handler_ref = $3)
  AND ($4::timestamptz IS NULL OR dead_lettered_at >= $4)
  AND ($5::timestamptz IS NULL OR dead_lettered_at < $5)
