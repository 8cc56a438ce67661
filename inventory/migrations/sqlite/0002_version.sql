-- The row's version for optimistic locking (the db-version guard): a write
-- applies only WHERE version = the version it read, and bumps it. Seeding
-- bumps it too, so a reader from before a reseed cannot overwrite it.
ALTER TABLE inventory ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
