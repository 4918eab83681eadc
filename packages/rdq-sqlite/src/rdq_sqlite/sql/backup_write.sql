-- Write the whole database, as one read snapshot, to a new file (:target must not exist).
VACUUM INTO :target
