-- Same as migrations/sqlite/0003_etcd_fence.sql; see the comment there.
ALTER TABLE inventory ADD COLUMN IF NOT EXISTS etcd_fence BIGINT NOT NULL DEFAULT 0;
