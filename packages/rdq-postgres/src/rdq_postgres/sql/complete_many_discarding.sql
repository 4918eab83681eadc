-- complete_many when some item discards its task (keep_succeeded = false; complete_many.sql
-- serves batches without one): item k is (:ids[k], :tokens[k], attempt :attempts[k], its
-- error type :error_types[k], :discards[k]); each row is fenced on its own token, and is
-- deleted when its item discards (its dedup row with it: ON DELETE CASCADE), else completed
-- as complete_many.sql completes it. done and found as in complete_many.sql (found is read in
-- the statement's snapshot, where a deleted row still shows: it is only asked about for ids
-- not done).
WITH input AS (
    SELECT *
    FROM unnest(
        :ids::text[], :tokens::text[], :attempts::json[], :error_types::text[],
        :discards::boolean[]
    ) AS i(id, token, attempt, error_type, discard)
),
upd AS (
    UPDATE {schema}.task AS t
    SET status = 'SUCCEEDED',
        completed_at = now(),
        {resolution}
    FROM input AS i
    WHERE t.id = i.id AND t.token = i.token AND t.status = 'IN_FLIGHT' AND NOT i.discard
    RETURNING t.id
),
del AS (
    DELETE FROM {schema}.task AS t
    USING input AS i
    WHERE t.id = i.id AND t.token = i.token AND t.status = 'IN_FLIGHT' AND i.discard
    RETURNING t.id
),
done AS (
    SELECT id FROM upd
    UNION ALL
    SELECT id FROM del
)
SELECT (SELECT array_agg(id) FROM done) AS done,
       CASE WHEN (SELECT count(*) FROM done) < cardinality(:ids::text[]) THEN
           (SELECT array_agg(id) FROM {schema}.task WHERE id = ANY(:ids::text[]))
       END AS found
