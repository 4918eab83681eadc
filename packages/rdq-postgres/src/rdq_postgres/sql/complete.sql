-- Success: append :attempt (error type :error_type), SUCCEEDED now; fenced on :token.
WITH upd AS (
    UPDATE {schema}.task AS t
    SET status = 'SUCCEEDED',
        completed_at = now(),
        {resolution}
    FROM (SELECT :attempt::json AS attempt, :error_type::text AS error_type) AS i
    WHERE t.id = :id AND t.token = :token AND t.status = 'IN_FLIGHT'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM upd) AS done,
       EXISTS (SELECT 1 FROM {schema}.task WHERE id = :id) AS found
