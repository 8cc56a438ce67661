-- Same schema as migrations/sqlite/0001_init.sql; see the comments there.
CREATE TABLE IF NOT EXISTS inventory (
    sku               TEXT        NOT NULL PRIMARY KEY,
    stock             BIGINT      NOT NULL,
    last_fence        BIGINT      NOT NULL DEFAULT 0,
    fenced_rejections BIGINT      NOT NULL DEFAULT 0,
    updated_at        TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS reservations (
    id         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id TEXT        NOT NULL UNIQUE,
    sku        TEXT        NOT NULL,
    quantity   BIGINT      NOT NULL CHECK (quantity > 0),
    guard      TEXT        NOT NULL,
    holder     TEXT        NOT NULL,
    fence      BIGINT      NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS reservations_sku ON reservations (sku);

CREATE TABLE IF NOT EXISTS fence_seq (
    id    INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    value BIGINT  NOT NULL
);
INSERT INTO fence_seq (id, value) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
