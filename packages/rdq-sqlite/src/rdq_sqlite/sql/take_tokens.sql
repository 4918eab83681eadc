-- What a claim took from a rate bucket: the tokens left as of :at (the version does not change).
UPDATE control SET tokens = :tokens, tokens_at = :at WHERE queue = :queue AND key = :key
