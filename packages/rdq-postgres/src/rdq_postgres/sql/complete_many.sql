-- complete for many claims at once: item k is (:ids[k], :tokens[k], attempt :attempts[k], its
-- error type :error_types[k]); each row is fenced on its own token. done lists the ids
-- completed, found the ids that exist, when any id was not done (such an id is StaleClaim if
-- found, else NotFound).
WITH input AS (
    SELECT *
    FROM unnest(:ids::text[], :tokens::text[], :attempts::json[], :error_types::text[])
        AS i(id, token, attempt, error_type)
),
upd AS (
    UPDATE {schema}.task AS t
    SET status = 'SUCCEEDED',
        completed_at = now(),
        {resolution}
    FROM input AS i
    WHERE t.id = i.id AND t.token = i.token AND t.status = 'IN_FLIGHT'
    RETURNING t.id
)
SELECT (SELECT array_agg(id) FROM upd) AS done,
       -- which ids exist is asked only when some item was not completed (the common batch
       -- completes them all and skips these lookups)
       CASE WHEN (SELECT count(*) FROM upd) < cardinality(:ids::text[]) THEN
           (SELECT array_agg(id) FROM {schema}.task WHERE id = ANY(:ids::text[]))
       END AS found
