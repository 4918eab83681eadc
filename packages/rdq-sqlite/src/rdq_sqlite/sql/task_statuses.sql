-- How many tasks the database holds per status (a backup's count).
SELECT status, count(*) FROM task GROUP BY status
