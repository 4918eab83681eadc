-- Counts of :queue by status (each from its partial index) and the oldest due PENDING time.
SELECT now() AS as_of,
       (SELECT count(*) FROM {schema}.task WHERE queue = :queue AND status = 'PENDING') AS pending,
       (SELECT count(*) FROM {schema}.task WHERE queue = :queue AND status = 'IN_FLIGHT')
           AS in_flight,
       (SELECT count(*) FROM {schema}.task WHERE queue = :queue AND status = 'DEAD') AS dead,
       (SELECT count(*) FROM {schema}.task WHERE queue = :queue AND status = 'SUCCEEDED')
           AS succeeded,
       (SELECT min(due_at) FROM {schema}.task
        WHERE queue = :queue AND status = 'PENDING' AND due_at <= now()) AS oldest_due
