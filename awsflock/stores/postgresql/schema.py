"""The PostgreSQL store's layout: one table and one function, and the GRANTs they need.

The table holds a row per lock (``slot`` -1: a plain lock's lease, a pool's size, the lock's
line of fair waiters), a row per used pool slot (``slot`` 0 and up), and a row per audit
record (``slot`` -1, ``audit`` set, its key under ``RESERVED_PREFIX``, which no lock name may
start with). The function ``<table>_step`` is every lock step: it locks the lock's row, checks
the step's condition and writes, in one statement, one round trip, one transaction, and
answers with the applied flag, the server's time and the lock's rows.

Time is the server's (``clock_timestamp()``, epoch milliseconds), so no client clock is
trusted and the skew window is 0. A call may pass ``now`` (and ``skew``) instead: the caller's
clock, for the conformance suite and the simulator, which run in virtual time.
"""

from __future__ import annotations

import re

from awsflock.protocol import BAR_KEEP_MS, DONE_MS

#: The layout's version, kept in the table's comment; table-create refuses any other.
LAYOUT = "awsflock lock table, layout 1"
#: A table name that quoted stays one identifier, with room for the function's suffix.
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,48}$")

#: An end step that finds nothing ever granted under its lease id bars the id (column
#: ``barred`` of the lock's row: id -> when), so a take of it that lands late is refused; each
#: is kept ``BAR_RETAIN_MS``, however many there are. Answers leave the column out.
BAR_RETAIN_MS = BAR_KEEP_MS
#: Every lease a take took over is kept in the table ``NAME_done`` (lock, LEASE_ID, how it
#: ended, when) for ``DONE_MS``, however many hand-offs follow: a release or force-release
#: retried after its first try went through unanswered still finds what it did, and a take that
#: lands late under a LEASE_ID already used is refused. The row's own history keeps three.

COLUMNS = (
    ("lock_id", "text"),
    ("slot", "integer"),
    ("lease_id", "text"),
    ("who", "jsonb"),
    ("lease_ms", "bigint"),
    ("expires_ms", "bigint"),
    ("acquired_ms", "bigint"),
    ("fence", "bigint"),
    ("ended", "text"),
    ("history", "jsonb"),
    ("forced_by", "text"),
    ("forced_reason", "text"),
    ("forced_ms", "bigint"),
    ("keeper", "text"),
    ("slots", "integer"),
    ("line", "jsonb"),
    ("next_number", "bigint"),
    ("polled_ms", "bigint"),
    ("audit", "jsonb"),
    ("barred", "jsonb"),
    ("renewed_ms", "bigint"),
)
#: Columns added to the layout after tables were made with it: table-create adds them.
ADDED_COLUMNS = (("renewed_ms", "bigint"),)

TABLE = """
CREATE TABLE {T} (
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
    line jsonb NOT NULL DEFAULT '{{}}',
    next_number bigint NOT NULL DEFAULT 0,
    polled_ms bigint,
    audit jsonb,
    barred jsonb NOT NULL DEFAULT '{{}}',
    renewed_ms bigint,
    PRIMARY KEY (lock_id, slot)
)
"""

#: The leases handed on, by lock (made by table-create beside the table, also for a table
#: made before it existed).
DONE = """
CREATE TABLE IF NOT EXISTS {D} (
    lock_id text NOT NULL,
    lease_id text NOT NULL,
    ended text NOT NULL,
    at_ms bigint NOT NULL,
    PRIMARY KEY (lock_id, lease_id)
);
CREATE INDEX IF NOT EXISTS {DI} ON {D} (lock_id, at_ms)
"""

# The step function. Every step locks the lock's own row first (FOR UPDATE), so steps on one
# lock run one at a time; a row that does not exist yet is inserted by a take or a resize
# (ON CONFLICT DO NOTHING, then locked: two first takes cannot both see no row).
#
# p: {"now", "skew"} (caller's clock; absent: the server's, skew 0), "slot", "slots",
# "lease", "who", "lease_ms", "ticket", "drop" ([[ticket, seen_ms], ...]), "keeper",
# "ended", "forced_by", "forced_reason", "since", "old", "new".
STEP = r"""
CREATE OR REPLACE FUNCTION {F}(p_op text, p_lock text, p jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $body$
DECLARE
    v_now bigint := COALESCE(
        (p->>'now')::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    v_cut bigint;
    v_slot integer := COALESCE((p->>'slot')::integer, -1);
    v_ticket text := p->>'ticket';
    v_drop jsonb := COALESCE(p->'drop', '[]');
    v_gone text[];
    h {T}%ROWTYPE;
    r {T}%ROWTYPE;
    v_has boolean;
    v_has_r boolean := false;
    v_ok boolean := false;
    v_barred boolean := false;
    v_ended text;
    v_line jsonb;
BEGIN
    IF p_op <> 'read' THEN
        -- Durable before it answers: a grant a crash can undo is a second holder.
        IF current_setting('fsync') = 'off' THEN
            RAISE EXCEPTION 'awsflock: fsync is off on this server' USING ERRCODE = '55000';
        END IF;
        IF (SELECT relpersistence FROM pg_class WHERE oid = '{T}'::regclass) <> 'p' THEN
            RAISE EXCEPTION 'awsflock: the lock table is not logged' USING ERRCODE = '55000';
        END IF;
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    v_cut := v_now - CASE WHEN p ? 'now' THEN COALESCE((p->>'skew')::bigint, 0) ELSE 0 END;
    IF p_op = 'read' THEN
        SELECT * INTO h FROM {T} WHERE lock_id = p_lock AND slot = -1;
    ELSE
        SELECT * INTO h FROM {T} WHERE lock_id = p_lock AND slot = -1 FOR UPDATE;
    END IF;
    v_has := FOUND;
    IF NOT v_has AND ((p_op = 'resize' AND p->>'old' IS NULL)
                      OR (p_op = 'take' AND v_ticket IS NULL) OR p_op = 'end') THEN
        INSERT INTO {T} (lock_id, slot) VALUES (p_lock, -1) ON CONFLICT DO NOTHING;
        SELECT * INTO h FROM {T} WHERE lock_id = p_lock AND slot = -1 FOR UPDATE;
        v_has := true;
    END IF;
    IF v_has AND v_slot >= 0 AND p_op IN ('take', 'renew', 'end') THEN
        SELECT * INTO r FROM {T} WHERE lock_id = p_lock AND slot = v_slot FOR UPDATE;
        v_has_r := FOUND;
    ELSIF v_has THEN
        r := h;
        v_has_r := true;
    END IF;
    -- Places in line to remove, each only if its last poll is still the one the caller saw.
    v_gone := ARRAY(SELECT e->>0 FROM jsonb_array_elements(v_drop) e);
    v_line := h.line;

    IF p_op = 'take' THEN
        v_ok := v_has AND (
            -- Never under a LEASE_ID barred or already handed on (a take landing late).
            NOT h.barred ? (p->>'lease')
            AND NOT EXISTS (
                SELECT 1 FROM {D} d WHERE d.lock_id = p_lock AND d.lease_id = p->>'lease')
            AND CASE WHEN v_slot < 0 THEN
                h.slots IS NULL
                AND (h.lease_id IS NULL OR h.ended <> '' OR h.expires_ms < v_cut)
                AND h.lease_id IS DISTINCT FROM p->>'lease'
                AND NOT h.history @> jsonb_build_array(jsonb_build_array(p->>'lease'))
            ELSE
                (h.slots = (p->>'slots')::integer OR (h.slots IS NULL AND (
                    h.lease_id IS NULL OR h.ended <> '' OR h.expires_ms < v_cut)))
                AND (NOT v_has_r OR (
                    (r.lease_id IS NULL OR r.ended <> '' OR r.expires_ms < v_cut)
                    AND r.lease_id IS DISTINCT FROM p->>'lease'
                    AND NOT r.history @> jsonb_build_array(jsonb_build_array(p->>'lease'))))
            END);
        IF v_ticket IS NULL THEN
            v_ok := v_ok AND (h.line = '{{}}' OR h.polled_ms < v_cut - {LAPSE});
        ELSE
            v_ok := v_ok AND h.line ? v_ticket AND NOT EXISTS (
                SELECT 1 FROM jsonb_array_elements(v_drop) e
                WHERE (h.line->(e->>0)->>'seen')::bigint IS DISTINCT FROM (e->>1)::bigint);
            v_line := h.line - v_ticket - v_gone;
        END IF;
        IF v_ok THEN
            IF v_slot >= 0 AND NOT v_has_r THEN
                INSERT INTO {T} (lock_id, slot) VALUES (p_lock, v_slot);
                SELECT * INTO r FROM {T} WHERE lock_id = p_lock AND slot = v_slot;
            END IF;
            IF r.lease_id IS NOT NULL THEN
                DELETE FROM {D} WHERE lock_id = p_lock AND at_ms < v_now - {DONE_MS};
                INSERT INTO {D} (lock_id, lease_id, ended, at_ms)
                    VALUES (p_lock, r.lease_id, r.ended, v_now) ON CONFLICT DO NOTHING;
            END IF;
            UPDATE {T} SET
                lease_id = p->>'lease',
                who = p->'who',
                lease_ms = (p->>'lease_ms')::bigint,
                expires_ms = v_now + (p->>'lease_ms')::bigint,
                acquired_ms = v_now,
                renewed_ms = (p->>'sent')::bigint,
                -- A new slot starts above its plain lock's tokens (rows are never deleted).
                fence = COALESCE(r.fence, GREATEST(v_now * 1000, COALESCE(h.fence, 0))) + 1,
                ended = '',
                history = jsonb_path_query_array(
                    CASE WHEN r.lease_id IS NULL THEN '[]'::jsonb
                    ELSE jsonb_build_array(jsonb_build_array(r.lease_id, r.ended)) END
                    || r.history, '$[0 to 2]'),
                forced_by = NULL,
                forced_reason = NULL,
                forced_ms = NULL,
                keeper = ''
            WHERE lock_id = p_lock AND slot = v_slot;
            UPDATE {T} SET
                line = v_line,
                slots = CASE WHEN v_slot >= 0 THEN (p->>'slots')::integer ELSE slots END
            WHERE lock_id = p_lock AND slot = -1;
        END IF;

    ELSIF p_op = 'renew' THEN
        v_ok := v_has_r AND r.lease_id = p->>'lease' AND r.ended = '' AND r.expires_ms > v_now
            AND CASE WHEN v_slot < 0 THEN h.slots IS NULL ELSE h.slots > v_slot END;
        -- A renew made before the lease's grant or latest renew (its end less its length) counts
        -- from that one's time.
        IF v_ok AND r.expires_ms - r.lease_ms > v_now THEN
            v_now := r.expires_ms - r.lease_ms;
        END IF;
        -- Only a renew sent after the one that set the end may move it back: one that lands
        -- late, after a later renew extended the lease further, must not shorten what that
        -- one's caller was told (its own caller learns the lease is held at least as long as it
        -- asked). The callers' clock readings order them (renewed_ms) only a whole window
        -- ('order') apart: within it, a clock ahead could make the renew sent first look later.
        IF v_ok AND v_now + (p->>'lease_ms')::bigint < r.expires_ms THEN
            v_ok := COALESCE(
                (p->>'sent')::bigint >= r.renewed_ms + COALESCE((p->>'order')::bigint, 0), false);
        END IF;
        IF v_ok THEN
            UPDATE {T} SET
                expires_ms = v_now + (p->>'lease_ms')::bigint,
                lease_ms = (p->>'lease_ms')::bigint,
                renewed_ms = GREATEST((p->>'sent')::bigint, renewed_ms),
                keeper = COALESCE(p->>'keeper', keeper)
            WHERE lock_id = p_lock AND slot = v_slot;
        END IF;

    ELSIF p_op = 'end' THEN
        v_ok := v_has_r AND r.lease_id = p->>'lease' AND r.ended = ''
            AND (v_slot >= 0 OR h.slots IS NULL);
        IF v_ok THEN
            UPDATE {T} SET
                ended = p->>'ended',
                expires_ms = v_now,
                forced_by = COALESCE(p->>'forced_by', forced_by),
                forced_reason = COALESCE(p->>'forced_reason', forced_reason),
                forced_ms = CASE WHEN p ? 'forced_by' THEN v_now ELSE forced_ms END
            WHERE lock_id = p_lock AND slot = v_slot;
        ELSIF NOT h.barred ? (p->>'lease') AND NOT (v_has_r AND (
                r.lease_id IS NOT DISTINCT FROM p->>'lease'
                OR r.history @> jsonb_build_array(jsonb_build_array(p->>'lease'))))
              AND NOT EXISTS (
                SELECT 1 FROM {D} d WHERE d.lock_id = p_lock AND d.lease_id = p->>'lease') THEN
            -- Nothing was ever granted here under this id, but a take of it may still be on
            -- its way (an acquire that gave up with its answer lost): bar the id on the lock's
            -- row, so that take is refused whenever it lands (within a day, however many
            -- are barred), and the lock is never held by nobody.
            UPDATE {T} SET barred = COALESCE((
                SELECT jsonb_object_agg(b.key, b.value) FROM jsonb_each(barred) b
                WHERE (b.value #>> '{{}}')::bigint >= v_now - {RETAIN}), '{{}}')
                || jsonb_build_object(p->>'lease', v_now)
            WHERE lock_id = p_lock AND slot = -1;
            v_barred := true;
        END IF;

    ELSIF p_op = 'join' THEN
        v_ok := v_has AND NOT h.line ? v_ticket;
        IF v_ok THEN
            UPDATE {T} SET
                line = line || jsonb_build_object(v_ticket, jsonb_build_object(
                    'n', next_number, 'who', p->'who',
                    'since', COALESCE((p->>'since')::bigint, v_now), 'seen', v_now)),
                next_number = next_number + 1,
                polled_ms = GREATEST(polled_ms, v_now)
            WHERE lock_id = p_lock AND slot = -1;
        END IF;

    ELSIF p_op = 'beat' THEN
        v_ok := v_has AND h.line ? v_ticket
            AND (h.line->v_ticket->>'seen')::bigint < v_now
            AND NOT EXISTS (
                SELECT 1 FROM jsonb_array_elements(v_drop) e
                WHERE (h.line->(e->>0)->>'seen')::bigint IS DISTINCT FROM (e->>1)::bigint);
        IF v_ok THEN
            UPDATE {T} SET
                line = jsonb_set(line, ARRAY[v_ticket, 'seen'], to_jsonb(v_now)) - v_gone,
                polled_ms = GREATEST(polled_ms, v_now)
            WHERE lock_id = p_lock AND slot = -1;
        END IF;

    ELSIF p_op = 'leave' THEN
        v_ok := v_has AND h.line ? v_ticket;
        IF v_ok THEN
            UPDATE {T} SET line = line - v_ticket WHERE lock_id = p_lock AND slot = -1;
        END IF;

    ELSIF p_op = 'resize' THEN
        v_ok := h.slots IS NOT DISTINCT FROM (p->>'old')::integer
            AND (h.slots IS NOT NULL
                 OR h.lease_id IS NULL OR h.ended <> '' OR h.expires_ms < v_cut)
            AND NOT EXISTS (
                SELECT 1 FROM {T} s WHERE s.lock_id = p_lock
                AND s.slot >= (p->>'new')::integer AND s.slot < COALESCE(h.slots, 0)
                AND NOT (s.lease_id IS NULL OR s.ended <> '' OR s.expires_ms < v_cut));
        IF v_ok THEN
            UPDATE {T} SET slots = (p->>'new')::integer WHERE lock_id = p_lock AND slot = -1;
        END IF;

    ELSIF p_op <> 'read' THEN
        RAISE EXCEPTION 'awsflock: unknown step %', p_op USING ERRCODE = '22023';
    END IF;

    -- How a refused renew's or end's lease ended, or a read's named one, if it was handed on
    -- (only then is the table of those read: a role with the read-only grants has no right
    -- to it, and status names no lease).
    IF NOT COALESCE(v_ok, false) AND p_op IN ('renew', 'end', 'read') AND p ? 'lease' THEN
        SELECT d.ended INTO v_ended FROM {D} d
        WHERE d.lock_id = p_lock AND d.lease_id = p->>'lease';
    END IF;
    RETURN jsonb_build_object(
        'applied', COALESCE(v_ok, false),
        'barred', v_barred,
        'ended', v_ended,
        'now', v_now,
        'rows', (SELECT COALESCE(
                    jsonb_agg(to_jsonb(t) - 'audit' - 'barred' ORDER BY t.slot), '[]')
                 FROM {T} t WHERE t.lock_id = p_lock));
END
$body$
"""


def check_name(name: str) -> str:
    """``name`` if it can name a lock table (quoted, with its function's suffix, one
    identifier); else a UsageError."""
    if not NAME.match(name):
        from awsflock import errors

        raise errors.UsageError(
            f"{name!r} cannot name a PostgreSQL lock table",
            hint="use 1 to 48 letters, digits, '_', '-' or '.'",
        )
    return name


def function_name(table: str) -> str:
    """The step function's name: the table's, with ``_step``."""
    return table + "_step"


def grants(table: str, role: str, *, read_only: bool = False) -> str:
    """The GRANT statements a role needs to use the table: every command, or (``read_only``)
    only ``status``, ``list`` and ``audit``. ``table-create`` needs CREATE on the schema and
    is best run by the table's owner."""
    t, f, d = quote(table), quote(function_name(table)), quote(done_name(table))
    who = quote(role)
    rights = "SELECT" if read_only else "SELECT, INSERT, UPDATE"
    lines = [
        f"-- awsflock: what role {role} needs on table {table}"
        + (" (status, list, audit only)" if read_only else ""),
        f"GRANT {rights} ON TABLE {t} TO {who};",
        *([] if read_only else [f"GRANT SELECT, INSERT, DELETE ON TABLE {d} TO {who};"]),
        f"GRANT EXECUTE ON FUNCTION {f}(text, text, jsonb) TO {who};",
        "-- and, for whoever runs table-create: CREATE on the schema, e.g.",
        f"-- GRANT CREATE ON SCHEMA public TO {who};",
    ]
    return "\n".join(lines)


def quote(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def done_name(table: str) -> str:
    """The table of the leases handed on: the table's name, with ``_done``."""
    return table + "_done"


def render(template: str, table: str, lapse_ms: int) -> str:
    return template.format(
        T=quote(table),
        F=quote(function_name(table)),
        D=quote(done_name(table)),
        DI=quote(done_name(table) + "_at"),
        LAPSE=int(lapse_ms),
        RETAIN=int(BAR_RETAIN_MS),
        DONE_MS=int(DONE_MS),
    )
