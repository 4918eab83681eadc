-- The control of :key is gone or limits nothing any more: its held tasks are claimable again.
UPDATE task SET held = NULL WHERE queue = :queue AND held = :key AND due_at IS NOT NULL
