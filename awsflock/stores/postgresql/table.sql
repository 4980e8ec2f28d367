-- awsflock's PostgreSQL lock table: a row per lock (slot -1), per used pool slot (0 and up)
-- and per audit record. Rows are never deleted: a lock's row keeps its fencing token and its
-- state (state, state_lease, state_ms: awsflock.state) across every grant. Made by
-- table-create (tables.py) when the table is missing. T: the table's name, a quoted
-- identifier (schema.table_statement()). Columns added after the layout's first release are
-- also in schema.ADDED_COLUMNS, which table-create adds to older tables.
CREATE TABLE {{T}} (
    lock_id text NOT NULL,
    slot integer NOT NULL,
    lease_id text,
    who jsonb,
    lease_ms bigint,
    expires_ms bigint,
    acquired_ms bigint,
    fence bigint,
    ended text NOT NULL DEFAULT '',
    history jsonb NOT NULL DEFAULT '[]',
    forced_by text,
    forced_reason text,
    forced_ms bigint,
    keeper text NOT NULL DEFAULT '',
    slots integer,
    line jsonb NOT NULL DEFAULT '{}',
    next_number bigint NOT NULL DEFAULT 0,
    polled_ms bigint,
    audit jsonb,
    barred jsonb NOT NULL DEFAULT '{}',
    renewed_ms bigint,
    shared boolean NOT NULL DEFAULT false,
    shares jsonb NOT NULL DEFAULT '{}',
    claim_ms bigint,
    prev jsonb,
    lapse jsonb,
    delay_ms bigint NOT NULL DEFAULT 0,
    cap_ms bigint,
    state bytea,
    state_lease text,
    state_ms bigint,
    PRIMARY KEY (lock_id, slot)
);
