-- Kept SUCCEEDED tasks for the purge phase, in rdq.task (today's layout): :count rows of queue
-- :queue, row i (from :first) completed at :start + (i - :first) x :step_us microseconds, a
-- version-7-shaped id of that millisecond, the harness's payload, one attempt record
-- (:attempt). fill_split.sql makes the very same rows in split.succeeded.
INSERT INTO rdq.task (
    id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count, attempts,
    created_at, next_attempt_at, completed_at, priority, keys, format_version, extra
)
SELECT lpad(to_hex((extract(epoch FROM k.at) * 1000)::bigint), 12, '0') || '7'
           || substr(md5(k.i::text), 1, 3) || '8' || substr(md5(k.i::text), 4, 15),
       :queue, 'bench.noop',
       json_build_object('i', k.i, 'kind', 'bench', 'to', 'user-' || k.i || '@example.com'),
       '{}', 'SUCCEEDED', 1, 0, ('[' || :attempt::text || ']')::json,
       k.at - interval '1 second', k.at - interval '1 second', k.at, 0, '{}', 1, '{}'
FROM (
    SELECT i, :start::timestamptz + (i - :first::bigint) * :step_us::bigint * interval '1 microsecond' AS at
    FROM generate_series(:first::bigint, :first::bigint + :count::bigint - 1) AS i
) AS k
ORDER BY k.i
