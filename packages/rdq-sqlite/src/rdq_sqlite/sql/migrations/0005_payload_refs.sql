-- Contract version 5: payload references. A task whose payload lives in a blob store carries
-- the reference in its headers (rdq-payload-ref); the engine asks which references tasks still
-- hold before it deletes a blob. An index of that header, of the tasks that have it only:
-- building it reads the table once (a populated file is upgraded in place).
CREATE INDEX task_payload_ref ON task (json_extract(headers, '$."rdq-payload-ref"'))
    WHERE json_extract(headers, '$."rdq-payload-ref"') IS NOT NULL;
