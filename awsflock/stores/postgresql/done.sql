-- awsflock's table of the leases handed on, beside the lock table: every lease a take took
-- over (its lock, LEASE_ID, how it ended, when), kept protocol.DONE_MS by the step function.
-- Made by table-create (tables.py) if missing, also beside a table made before it existed.
-- D: its name, DI: its index's name, quoted identifiers (schema.done_statements(), which
-- splits the statements at a semicolon that ends a line).
CREATE TABLE IF NOT EXISTS {{D}} (
    lock_id text NOT NULL,
    lease_id text NOT NULL,
    ended text NOT NULL,
    at_ms bigint NOT NULL,
    PRIMARY KEY (lock_id, lease_id)
);
CREATE INDEX IF NOT EXISTS {{DI}} ON {{D}} (lock_id, at_ms);
