-- Admit one task under dedup key :dedup_key (admit_task(), migration 0011): one row
-- (outcome, task_id, queue). :keys: the task's keys joined by U+001F ('' for none).
SELECT outcome, task_id, queue FROM {schema}.admit_task(
    :dedup_key, :dedup_mode, :window_us::bigint, :max_age_us::bigint,
    :id, :queue, :handler_ref, :payload::json, :headers::json, :attempt_count::integer,
    :redrive_count::integer, :attempts::json, :error_type, :next_attempt_at::timestamptz,
    :delay_us::bigint, :retry::json, :format_version::integer, :extra::json,
    :priority::smallint, string_to_array(:keys::text, chr(31))
)
