-- What a claim took from a gate (the version does not change for that).
UPDATE control SET gate = :gate WHERE queue = :queue AND key = :key
