-- A batch of completions (variants narrow and narrow_hot): the narrow row released and marked
-- SUCCEEDED, fenced on its token as rdq's complete_many is, and the attempt record appended
-- to the body of each row completed.
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::json[]) AS i(id, token, attempt)
),
done AS (
    UPDATE {variant}.lease AS l
    SET status = 'SUCCEEDED', completed_at = now(), lease_expires_at = NULL, claimed_at = NULL,
        claimed_by = NULL, token = NULL, attempt_count = l.attempt_count + 1
    FROM input AS i
    WHERE l.id = i.id AND l.token = i.token AND l.status = 'IN_FLIGHT'
    RETURNING l.id
),
recorded AS (
    UPDATE {variant}.body AS b
    SET attempts = rdq.append_attempt(b.attempts, i.attempt)
    FROM done AS d JOIN input AS i ON i.id = d.id
    WHERE b.id = d.id
    RETURNING b.id
)
SELECT (SELECT count(*) FROM done) AS done, (SELECT count(*) FROM recorded) AS recorded
