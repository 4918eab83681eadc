-- fill_today.sql's rows (the same ids, times and content) in split.succeeded: the partitions
-- of their completed_at must exist.
INSERT INTO split.succeeded (
    id, queue, handler_ref, payload, headers, attempt_count, redrive_count, attempts,
    created_at, next_attempt_at, completed_at, priority, keys, format_version, extra
)
SELECT lpad(to_hex((extract(epoch FROM k.at) * 1000)::bigint), 12, '0') || '7'
           || substr(md5(k.i::text), 1, 3) || '8' || substr(md5(k.i::text), 4, 15),
       :queue, 'bench.noop',
       json_build_object('i', k.i, 'kind', 'bench', 'to', 'user-' || k.i || '@example.com'),
       '{}', 1, 0, ('[' || :attempt::text || ']')::json,
       k.at - interval '1 second', k.at - interval '1 second', k.at, 0, '{}', 1, '{}'
FROM (
    SELECT i, :start::timestamptz + (i - :first::bigint) * :step_us::bigint * interval '1 microsecond' AS at
    FROM generate_series(:first::bigint, :first::bigint + :count::bigint - 1) AS i
) AS k
ORDER BY k.i
