-- stock_after is the stock a committed reservation left behind: the value
-- its write set (or, for an atomic decrement, the value the row then held).
-- With it the ledger tells, for every committed reservation, the state it
-- moved the row to, so that a model checker can replay each SKU's stock as
-- a register (drill/linear). -1 on rows written before it existed.
ALTER TABLE reservations ADD COLUMN stock_after INTEGER NOT NULL DEFAULT -1;
