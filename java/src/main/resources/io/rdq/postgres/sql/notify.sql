-- Announce "a task of :queue may be due" to idle workers (LISTEN {channel}).
SELECT pg_notify('{channel}', :queue)
