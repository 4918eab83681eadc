-- rdq schema version 2: the error a batch enqueue raises (rolling the whole statement back)
-- when one of its ids already belongs to another queue.
--
-- SQLSTATE RQ409; DETAIL is {"id": ..., "queue": ...} naming the id and the queue that holds it.

CREATE FUNCTION {schema}.id_conflict(task_id text, queue text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'task id % exists in queue %', task_id, queue
        USING ERRCODE = 'RQ409',
              DETAIL = json_build_object('id', task_id, 'queue', queue)::text;
END
$$;
