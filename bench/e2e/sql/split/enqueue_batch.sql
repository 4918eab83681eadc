-- Admit many new tasks into split.live in one statement: rdq's enqueue_batch_fresh.sql (the
-- statement Client.submit_many's batches take), its parameters and result, over the split
-- layout. An id is stored only if no table of the layout holds it: split.live by its primary
-- key (ON CONFLICT, as today), split.succeeded and split.dead by a probe of their id indexes
-- (no unique index spans partitions; today's primary key covers every status). The floor of
-- each queue lowered as admission_floor.part does; `present` and the id conflict as
-- admission_result.part has them, the holder read from the three tables (split.task_queue).
WITH input AS (
    SELECT i.id, COALESCE(i.queue, (:queues::text[])[1]) AS queue,
           COALESCE(i.handler_ref, (:handler_refs::text[])[1]) AS handler_ref, i.payload,
           COALESCE(i.headers, '{}') AS headers,
           COALESCE(i.priority, (:priorities::smallint[])[1]) AS priority,
           COALESCE(i.keys, (:keys::text[])[1]) AS keys, i.n
    FROM unnest(
        :ids::text[], :queues::text[], :handler_refs::text[], :payloads::json[],
        :headers::json[], :priorities::smallint[], :keys::text[]
    ) WITH ORDINALITY AS i(id, queue, handler_ref, payload, headers, priority, keys, n)
),
ins AS (
    INSERT INTO split.live (
        id, queue, handler_ref, payload, headers, status, attempt_count, redrive_count,
        attempts, created_at, next_attempt_at, format_version, extra, priority, keys
    )
    SELECT i.id, i.queue, i.handler_ref, i.payload, i.headers, 'PENDING', 0, 0, '[]', now(),
           now() + :delay_us::bigint * interval '1 microsecond', :format_version::integer, '{}',
           i.priority, string_to_array(i.keys, chr(31))
    FROM input AS i
    WHERE NOT EXISTS (SELECT FROM split.succeeded AS s WHERE s.id = i.id)
      AND NOT EXISTS (SELECT FROM split.dead AS d WHERE d.id = i.id)
    ORDER BY i.n
    ON CONFLICT (id) DO NOTHING
    RETURNING id, queue, due_at
),
lowered AS (
    SELECT split.lower_floor(ins.queue, min(ins.due_at)) AS lowered
    FROM ins
    WHERE ins.due_at IS NOT NULL
    GROUP BY ins.queue
),
counted AS (
    SELECT count(*) AS stored FROM ins
),
skipped AS MATERIALIZED (
    SELECT i.id, i.queue, i.n
    FROM input AS i
    WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.id = i.id)
)
SELECT CASE WHEN c.stored < cardinality(:ids::text[]) THEN ARRAY(
           SELECT s.id FROM skipped AS s ORDER BY s.n
       ) END AS present,
       CASE WHEN c.stored < cardinality(:ids::text[]) THEN (
           SELECT rdq.id_conflict(s.id, s.held_by)
           FROM (
               SELECT s.id, s.queue, s.n, split.task_queue(s.id) AS held_by
               FROM skipped AS s
               OFFSET 0
           ) AS s
           WHERE s.held_by <> s.queue
           ORDER BY s.n
           LIMIT 1
       ) END AS conflict,
       (SELECT count(*) FROM lowered) AS floors
FROM counted AS c
