-- Success on a queue that keeps no succeeded task (keep_succeeded = false): the claimed task
-- is deleted instead of kept SUCCEEDED, fenced on :token as complete.sql is. Its dedup row
-- goes with it (ON DELETE CASCADE), and so does its payload reference (an index entry).
-- found is read in the statement's snapshot (a deleted row still shows): it is only asked
-- about when nothing was deleted.
WITH del AS (
    DELETE FROM {schema}.task AS t
    WHERE t.id = :id AND t.token = :token AND t.status = 'IN_FLIGHT'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM del) AS done,
       EXISTS (SELECT 1 FROM {schema}.task WHERE id = :id) AS found
