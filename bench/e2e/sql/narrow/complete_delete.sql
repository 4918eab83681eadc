-- A batch of completions (variant delete): each job deleted, fenced on its token.
WITH done AS (
    DELETE FROM "delete".job AS j
    USING unnest($1::text[], $2::text[]) AS i(id, token)
    WHERE j.id = i.id AND j.token = i.token
    RETURNING j.id
)
SELECT (SELECT count(*) FROM done) AS done, (SELECT count(*) FROM done) AS recorded
