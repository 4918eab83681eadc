-- Contract version 4: the claim order a queue's own control (key '*') may ask for — fair
-- shares among the groups of its tasks (fair: a key prefix) and priority aging (aging: seconds
-- of waiting worth one step of priority). NULL in both: claims by strict priority, as before.
-- Two columns without a default: instant on any file.
ALTER TABLE control ADD COLUMN fair TEXT;
ALTER TABLE control ADD COLUMN aging REAL;
