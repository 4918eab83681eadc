UPDATE task SET lease_expires_at = :expires, held = NULL
WHERE id = :id AND status = 'IN_FLIGHT' AND token = :token
RETURNING lease_expires_at
