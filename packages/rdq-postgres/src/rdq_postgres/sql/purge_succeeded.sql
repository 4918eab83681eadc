-- Delete the SUCCEEDED tasks of queue $1 completed before $2.
DELETE FROM {schema}.task
WHERE queue = $1 AND status = 'SUCCEEDED' AND completed_at < $2
