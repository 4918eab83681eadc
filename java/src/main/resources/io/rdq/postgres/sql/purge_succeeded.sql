-- Delete the SUCCEEDED tasks of :queue completed before :older_than.
DELETE FROM {schema}.task
WHERE queue = :queue AND status = 'SUCCEEDED' AND completed_at < :older_than::timestamptz
