-- Added in the database, never read and written back: concurrent additions lose none.
INSERT INTO counts (queue, minute, succeeded, failed, dead, deferred)
VALUES (:queue, :minute, :succeeded, :failed, :dead, :deferred)
ON CONFLICT (queue, minute) DO UPDATE SET
    succeeded = succeeded + excluded.succeeded,
    failed = failed + excluded.failed,
    dead = dead + excluded.dead,
    deferred = deferred + excluded.deferred
