INSERT INTO audit (time, actor, action, queue, selector, count, reason, error)
VALUES (:time, :actor, :action, :queue, :selector, :count, :reason, :error)
RETURNING seq
