-- A claim found the task held back by the control of :key: it leaves the claim index.
UPDATE task SET held = :key WHERE id = :id
