-- How many tasks each queue holds per status (read from the index alone).
SELECT queue, status, count(*) FROM task GROUP BY queue, status
