-- Admit one task: a row back if it was inserted, none if the id exists (then
-- existing_queue.sql tells whether in the same queue or another). Due at $10 if given, else
-- at now() + $15 microseconds.
INSERT INTO {schema}.task (
    id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
    attempts, error_type, created_at, next_attempt_at, retry, format_version, extra, priority
)
VALUES (
    $1, $2, $3, $4::json, $5::json, 'PENDING', $6, $7,
    $8::json, $9, now(),
    COALESCE($10::timestamptz, now() + $15::bigint * interval '1 microsecond'), $11::json, $12,
    $13::json, $14
)
ON CONFLICT (id) DO NOTHING
RETURNING queue
