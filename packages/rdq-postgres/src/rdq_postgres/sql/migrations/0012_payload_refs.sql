-- rdq schema version 12: payload references (contract version 5, capability payload_refs).
--
-- A task whose payload lives in a blob store carries the reference in its headers
-- (rdq-payload-ref); before the engine deletes a blob it asks which references tasks still hold
-- (held_payload_refs.sql). An index of that header, of the tasks that have it only (a partial
-- index: tasks with inline payloads, nearly all, are not in it). Building it reads the table
-- once, under a lock that holds writes back meanwhile: on a table of many millions of rows,
-- create it beforehand with CREATE INDEX CONCURRENTLY under this name, and the migration finds
-- it there.
CREATE INDEX IF NOT EXISTS task_payload_ref_idx ON {schema}.task ((headers ->> 'rdq-payload-ref'))
    WHERE (headers ->> 'rdq-payload-ref') IS NOT NULL;
