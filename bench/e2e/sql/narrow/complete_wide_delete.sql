-- A batch of completions (variant wide_delete): rdq's own task rows, each deleted on completion
-- instead of kept with its history, fenced on its token: what keeping the history costs.
WITH done AS (
    DELETE FROM rdq.task AS t
    USING unnest($1::text[], $2::text[]) AS i(id, token)
    WHERE t.id = i.id AND t.token = i.token AND t.status = 'IN_FLIGHT'
    RETURNING t.id
)
SELECT (SELECT count(*) FROM done) AS done, (SELECT count(*) FROM done) AS recorded
