-- rdq schema version 12: payload references (contract version 5, capability payload_refs).
--
-- A task whose payload lives in a blob store carries the reference in its headers
-- (rdq-payload-ref); before the engine deletes a blob it asks which references tasks still hold
-- (held_payload_refs.sql). An index of that header, of the tasks that have it only (a partial
-- index: tasks with inline payloads, nearly all, are not in it). Building it reads the table
-- once, under a lock that holds writes back meanwhile: on a table of many millions of rows,
-- create it beforehand with CREATE INDEX CONCURRENTLY under this name, and the migration finds
-- it there.
--
-- The reference is read from the headers' JSON text, not with ->>: headers are json (kept as
-- written, \u0000 escapes included), and ->> refuses to turn a \u0000 into text anywhere in
-- the object, so an index on it would refuse every task with a NUL in a header. A reference
-- is sha256:<hex>, written without escapes; the pattern needs the key's closing quote and
-- colon unescaped, so a header value that quotes the key (written as \"rdq-payload-ref\")
-- does not match.
CREATE INDEX IF NOT EXISTS task_payload_ref_idx
    ON {schema}.task ((substring(headers::text FROM '"rdq-payload-ref"\s*:\s*"([^"\\]+)"')))
    WHERE headers::text LIKE '%"rdq-payload-ref"%';
