-- Contract version 5: payload references. A task whose payload lives in a blob store carries
-- the reference in its headers (rdq-payload-ref); the engine asks which references tasks still
-- hold before it deletes a blob. An index of that header, of the tasks that have it only:
-- building it reads the table once (a populated file is upgraded in place). Headers spoiled
-- by another writer (not JSON) index as no reference: json_extract would refuse them, and with
-- them every write of such a row.
CREATE INDEX task_payload_ref ON task ((CASE WHEN json_valid(headers) THEN json_extract(headers, '$."rdq-payload-ref"') END))
    WHERE (CASE WHEN json_valid(headers) THEN json_extract(headers, '$."rdq-payload-ref"') END) IS NOT NULL;
