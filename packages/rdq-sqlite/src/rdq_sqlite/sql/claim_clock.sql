-- A claim's first read: the clock row, and whether the claim goes through the queue's controls
-- (it has a control record, or held tasks): two index seeks, false for a queue without any.
SELECT now_us, {controlled} FROM clock WHERE one = 1
