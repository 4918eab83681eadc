-- Failure: append :attempt (error type :error_type), PENDING due at :next_at; fenced on :token.
-- lower_floor(): the task is due again (migration 0014).
WITH upd AS (
    UPDATE {schema}.task AS t
    SET status = 'PENDING',
        next_attempt_at = :next_at::timestamptz,
        {resolution}
    FROM (SELECT :attempt::json AS attempt, :error_type::text AS error_type) AS i
    WHERE t.id = :id AND t.token = :token AND t.status = 'IN_FLIGHT'
    RETURNING t.queue, t.next_attempt_at
)
SELECT EXISTS (SELECT 1 FROM upd) AS done,
       EXISTS (SELECT 1 FROM {schema}.task WHERE id = :id) AS found,
       (SELECT queue FROM upd) AS queue,
       (SELECT {schema}.lower_floor(queue, next_attempt_at) FROM upd) AS lowered
