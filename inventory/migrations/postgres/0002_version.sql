-- Same as migrations/sqlite/0002_version.sql; see the comment there.
ALTER TABLE inventory ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL DEFAULT 0;
