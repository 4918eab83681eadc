INSERT INTO task (
    id, queue, handler_ref, status, priority, payload, headers, attempt_count, redrive_count,
    attempts, last_error_type, created_at, next_attempt_at, retry, format_version, extra, keys
) VALUES (
    :id, :queue, :handler_ref, 'PENDING', :priority, :payload, :headers, :attempt_count,
    :redrive_count, :attempts, :last_error_type, :created_at, :next_attempt_at, :retry,
    :format_version, :extra, :keys
)
