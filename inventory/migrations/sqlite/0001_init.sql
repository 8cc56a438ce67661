-- The protected resource: one row per SKU. last_fence is the highest fencing
-- token that has fenced this row; fenced_rejections counts stale writers the
-- row turned away since the last seed. stock has no CHECK (stock >= 0) on
-- purpose: the safety checker must be able to see an oversell, not an error.
CREATE TABLE IF NOT EXISTS inventory (
    sku               TEXT      NOT NULL PRIMARY KEY,
    stock             INTEGER   NOT NULL,
    last_fence        INTEGER   NOT NULL DEFAULT 0,
    fenced_rejections INTEGER   NOT NULL DEFAULT 0,
    updated_at        TIMESTAMP NOT NULL
);

-- The ledger: one row per committed reservation, written in the same
-- transaction as the stock change, so initial - final = sum(quantity).
CREATE TABLE IF NOT EXISTS reservations (
    id         INTEGER   PRIMARY KEY AUTOINCREMENT,
    request_id TEXT      NOT NULL UNIQUE,
    sku        TEXT      NOT NULL,
    quantity   INTEGER   NOT NULL CHECK (quantity > 0),
    guard      TEXT      NOT NULL,
    holder     TEXT      NOT NULL,
    fence      INTEGER   NOT NULL DEFAULT 0,
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX IF NOT EXISTS reservations_sku ON reservations (sku);

-- The fencing token source: a single monotonic counter, bumped in its own
-- transaction (the same statement on both stores).
CREATE TABLE IF NOT EXISTS fence_seq (
    id    INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
);
INSERT INTO fence_seq (id, value) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
