-- etcd_fence is the highest etcd revision (the etcd-fenced guard's token, its
-- lock key's create revision) that has fenced this row. It is not last_fence:
-- a new etcd cluster counts revisions from 1 again, and they must never be
-- compared with the store's own fence_seq tokens. Seeding zeroes it.
ALTER TABLE inventory ADD COLUMN etcd_fence INTEGER NOT NULL DEFAULT 0;
