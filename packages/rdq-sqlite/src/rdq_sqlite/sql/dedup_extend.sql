-- Start the window of dedup key :key again: held until :until_us.
UPDATE dedup SET until_us = :until_us WHERE key = :key
