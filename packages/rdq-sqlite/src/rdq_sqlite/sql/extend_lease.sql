UPDATE task SET lease_expires_at = :expires
WHERE id = :id AND status = 'IN_FLIGHT' AND token = :token
RETURNING lease_expires_at
