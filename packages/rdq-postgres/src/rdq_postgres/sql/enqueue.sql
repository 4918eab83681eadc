-- Admit one task: a row back if it was inserted, none if the id exists (then
-- existing_queue.sql tells whether in the same queue or another). Due at :next_attempt_at if
-- given, else at now() + :delay_us microseconds. :keys: the task's keys joined by U+001F (a
-- character no key holds; '' for none). :notify: whether this transaction carries the NOTIFY
-- that wakes the queue's listeners as it commits (notify.sql's, when nothing else is being
-- announced: _notify.py). lower_floor(): the admission makes a task due (migration 0014).
WITH admitted AS (
    INSERT INTO {schema}.task (
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, error_type, created_at, next_attempt_at, retry, format_version, extra, priority,
        keys
    )
    VALUES (
        :id, :queue, :handler_ref, :payload::json, :headers::json, 'PENDING', :attempt_count,
        :redrive_count, :attempts::json, :error_type, now(),
        COALESCE(
            :next_attempt_at::timestamptz, now() + :delay_us::bigint * interval '1 microsecond'
        ),
        :retry::json, :format_version, :extra::json, :priority,
        string_to_array(:keys::text, chr(31))
    )
    ON CONFLICT (id) DO NOTHING
    RETURNING queue, next_attempt_at
)
SELECT queue, CASE WHEN :notify::boolean THEN pg_notify('{channel}', queue) END AS notified,
       {schema}.lower_floor(queue, next_attempt_at) AS lowered
FROM admitted
