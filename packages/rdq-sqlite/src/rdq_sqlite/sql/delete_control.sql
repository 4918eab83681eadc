DELETE FROM control WHERE queue = :queue AND key = :key AND version = :expected
