-- A batch of completions (variant attempt_rows): the narrow row released and marked SUCCEEDED,
-- fenced on its token, and each attempt record inserted as a row of its own.
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::json[]) AS i(id, token, attempt)
),
done AS (
    UPDATE attempt_rows.lease AS l
    SET status = 'SUCCEEDED', completed_at = now(), lease_expires_at = NULL, claimed_at = NULL,
        claimed_by = NULL, token = NULL, attempt_count = l.attempt_count + 1
    FROM input AS i
    WHERE l.id = i.id AND l.token = i.token AND l.status = 'IN_FLIGHT'
    RETURNING l.id, l.attempt_count
),
recorded AS (
    INSERT INTO attempt_rows.attempt (task_id, number, record)
    SELECT d.id, d.attempt_count, i.attempt FROM done AS d JOIN input AS i ON i.id = d.id
    RETURNING task_id
)
SELECT (SELECT count(*) FROM done) AS done, (SELECT count(*) FROM recorded) AS recorded
