-- A PENDING holder takes a submission's payload and headers and, when :due is set (debounce),
-- its due time (which clears a hold by a control, as every change of due time does).
UPDATE task SET
    payload = :payload,
    headers = :headers,
    next_attempt_at = COALESCE(:due, next_attempt_at),
    held = CASE WHEN :due IS NULL THEN held END
WHERE id = :id AND status = 'PENDING'
