-- awsflock's PostgreSQL step function, <table>_step(p_op, p_lock, p): every lock step is one
-- call of it, one statement, one round trip, one transaction. Loaded by
-- awsflock/stores/postgresql/schema.py (step_function()), which fills in the placeholders
-- (names in double braces, awsflock/stores/programs.py): T the lock table, D its table of
-- leases handed on, F this function (quoted identifiers); LAPSE, RETAIN, DONE_MS (integers,
-- ms: protocol.LINE_LAPSE_MS, schema.BAR_RETAIN_MS, protocol.DONE_MS), MAX_SHARES, MAX_STATE
-- (shares.MAX_SHARES, state.MAX_STATE). table-create installs it (tables.py).
-- Checked: tests/test_step_programs.py installs it on a real PostgreSQL and runs every step;
-- the pre-commit hook "step-programs" runs that file.
--
-- Every step locks the lock's own row first (FOR UPDATE), so steps on one lock run one at a
-- time; a row that does not exist yet is inserted by a take, an end or a resize (ON CONFLICT
-- DO NOTHING, then locked: two first takes cannot both see no row). Time is the server's
-- (clock_timestamp(), epoch ms) unless p holds "now".
--
-- p_op: the step: take, renew, end, join, beat, leave, resize, read or state (or a set's:
-- take_all, renew_all, end_all; or a share's: take_share, renew_share, end_share, claim).
-- p_lock: the lock's name.
-- p: its parameters (jsonb). Every step may have:
--   now, skew  the caller's clock and skew window (ms); absent: the server's clock, skew 0
-- and each step its own, listed above its branch below.
--
-- Answer, every step: {"applied": bool, "barred": bool (an end step not applied that barred its
-- lease id), "ended": how the step's lease ended if it was handed on ("released",
-- "forced:ACTION", "" ran out; for a refused renew or end, or a read naming a lease; else
-- null), "now": the step's time (ms), "rows": the lock's rows after the step, by slot, without
-- "audit", "barred" and the state's columns}; the step state answers "state" too. Errors:
-- SQLSTATE 55000 (fsync off, or the table not logged: a grant a crash could undo; a pool's
-- first row deleted by hand), 22023 (an unknown step, or arguments out of range).
CREATE OR REPLACE FUNCTION {{F}}(p_op text, p_lock text, p jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $body$
DECLARE
    v_now bigint := COALESCE(
        (p->>'now')::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    v_cut bigint;
    v_slot integer := COALESCE((p->>'slot')::integer, -1);
    v_ticket text := p->>'ticket';
    v_drop jsonb := COALESCE(p->'drop', '[]');
    v_gone text[];
    h {{T}}%ROWTYPE;
    r {{T}}%ROWTYPE;
    v_has boolean;
    v_has_r boolean := false;
    v_ok boolean := false;
    v_barred boolean := false;
    v_ended text;
    v_line jsonb;
    v_each record;
    v_one jsonb;
    v_answers jsonb := '{}';
    v_free boolean;
    v_fence bigint;
    v_end bigint;
    v_entry jsonb;
    v_left jsonb;
    v_prev jsonb := '{}';
    v_lapse jsonb;
    v_h_free boolean;
    v_r_free boolean;
    v_state bytea;
    v_keep boolean := false;
    -- The columns answers leave out (the step state reads the state's).
    c_hidden CONSTANT text[] := '{audit,barred,state,state_lease,state_ms}';
BEGIN
    -- A renew that writes the state is sent as renew_state: a step function older than the
    -- state answers it "unknown step", where a renew would apply and drop the state unsaid.
    IF p_op = 'renew_state' AND p ? 'state' THEN
        p_op := 'renew';
    ELSIF p ? 'state' OR p_op = 'renew_state' THEN
        RAISE EXCEPTION 'awsflock: bad arguments for step %: %', p_op, p USING ERRCODE = '22023';
    END IF;
    -- A set's step (awsflock/sets.py), p_lock unused: take_all, renew_all or end_all.
    --   steps: [{"lock": NAME, "p": {...}}, ...], 1 to 32 distinct names, each a plain lock.
    --   Each lock's own step (take, renew, end; never with state), made in the order of the
    --   names' bytes, so that two sets lock their rows in one order and never deadlock.
    --   take_all is all or nothing: once a take is refused, every take made before it is
    --   rolled back (the sub-block), and each lock is read as it is. Answer: {"applied":
    --   every step applied, "now", "answers": each step's answer, in the order given}.
    IF p_op IN ('take_all', 'renew_all', 'end_all') THEN
        IF jsonb_typeof(p->'steps') IS DISTINCT FROM 'array'
           OR jsonb_array_length(p->'steps') NOT BETWEEN 1 AND 32
           OR (SELECT count(DISTINCT e->>'lock') <> count(*) OR bool_or(e->>'lock' IS NULL)
                      OR bool_or(COALESCE(e->'p'->>'slot', e->'p'->>'ticket') IS NOT NULL)
                      OR bool_or(e->'p' ? 'state')
               FROM jsonb_array_elements(p->'steps') e) THEN
            RAISE EXCEPTION 'awsflock: bad arguments for step %: %', p_op, p USING ERRCODE = '22023';
        END IF;
        BEGIN
            FOR v_each IN SELECT e.value AS step, e.n FROM jsonb_array_elements(p->'steps')
                          WITH ORDINALITY AS e(value, n) ORDER BY e.value->>'lock' COLLATE "C"
            LOOP
                -- One time for every name (the server's, read once above, unless the caller
                -- gave its own): the set's leases start and end together.
                v_one := {{F}}(left(p_op, -4), v_each.step->>'lock',
                               jsonb_build_object('now', v_now) || (v_each.step->'p'));
                v_answers := v_answers || jsonb_build_object(v_each.n::text, v_one);
                IF p_op = 'take_all' AND NOT (v_one->>'applied')::boolean THEN
                    RAISE EXCEPTION 'refused' USING ERRCODE = 'AF001';
                END IF;
            END LOOP;
        EXCEPTION WHEN SQLSTATE 'AF001' THEN
            v_answers := '{}';
            FOR v_each IN SELECT e.value AS step, e.n FROM jsonb_array_elements(p->'steps')
                          WITH ORDINALITY AS e(value, n)
            LOOP
                v_one := {{F}}('read', v_each.step->>'lock',
                               jsonb_build_object('now', v_each.step->'p'->'now'));
                v_answers := v_answers || jsonb_build_object(v_each.n::text, v_one);
            END LOOP;
        END;
        RETURN jsonb_build_object(
            'applied', NOT EXISTS (SELECT 1 FROM jsonb_each(v_answers) a
                                   WHERE NOT (a.value->>'applied')::boolean),
            'now', v_now,
            'answers', (SELECT jsonb_agg(a.value ORDER BY a.key::integer)
                        FROM jsonb_each(v_answers) a));
    END IF;
    -- state: read the lock's state (awsflock.state; a renew writes it), no parameters. One
    --   read of the lock's row, nothing written, no row locked. Answer: {"applied": false,
    --   "now", "rows": [], "state": {"data": the bytes (base64), "lease": the lease that wrote
    --   them, "ms": its stamp}, or null: never written}.
    IF p_op = 'state' THEN
        SELECT * INTO h FROM {{T}} WHERE lock_id = p_lock AND slot = -1;
        RETURN jsonb_build_object('applied', false, 'barred', false, 'ended', NULL,
            'now', v_now, 'rows', '[]'::jsonb,
            'state', CASE WHEN h.state IS NOT NULL THEN jsonb_build_object(
                'data', translate(encode(h.state, 'base64'), E'\n', ''),
                'lease', h.state_lease, 'ms', h.state_ms) END);
    END IF;
    IF p_op <> 'read' THEN
        -- Durable before it answers: a grant a crash can undo is a second holder.
        IF current_setting('fsync') = 'off' THEN
            RAISE EXCEPTION 'awsflock: fsync is off on this server' USING ERRCODE = '55000';
        END IF;
        IF (SELECT relpersistence FROM pg_class WHERE oid = '{{T}}'::regclass) <> 'p' THEN
            RAISE EXCEPTION 'awsflock: the lock table is not logged' USING ERRCODE = '55000';
        END IF;
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    IF p ? 'state' THEN
        v_state := decode(p->>'state', 'base64');
    END IF;
    -- Arguments the library never sends, refused before anything is read or written: a slot
    -- below 0, a pool's slot taken without the pool's size above it, a resize to no slots,
    -- state but on a plain lock's renew (with its stamp, at most MAX_STATE bytes).
    IF v_slot < -1 OR (p_op = 'take' AND v_slot >= 0
                       AND COALESCE((p->>'slots')::integer, 0) <= v_slot)
       OR (p_op = 'resize' AND COALESCE((p->>'new')::integer, 0) < 1)
       OR (p ? 'state' AND (p_op <> 'renew' OR v_slot >= 0 OR v_state IS NULL
                            OR octet_length(v_state) > {{MAX_STATE}} OR p->>'state_ms' IS NULL))
    THEN
        RAISE EXCEPTION 'awsflock: bad arguments for step %: %', p_op, p USING ERRCODE = '22023';
    END IF;
    v_cut := v_now - CASE WHEN p ? 'now' THEN COALESCE((p->>'skew')::bigint, 0) ELSE 0 END;
    IF p_op = 'read' THEN
        SELECT * INTO h FROM {{T}} WHERE lock_id = p_lock AND slot = -1;
    ELSE
        SELECT * INTO h FROM {{T}} WHERE lock_id = p_lock AND slot = -1 FOR UPDATE;
    END IF;
    v_has := FOUND;
    IF NOT v_has AND ((p_op = 'resize' AND p->>'old' IS NULL)
                      OR (p_op = 'take' AND v_ticket IS NULL)
                      OR p_op IN ('end', 'take_share', 'end_share')) THEN
        -- Rows are never deleted: slot rows without their head row are a pool whose head was
        -- deleted by hand. Refused, not made a plain lock granted beside the pool's holders.
        IF EXISTS (SELECT 1 FROM {{T}} WHERE lock_id = p_lock AND slot >= 0) THEN
            RAISE EXCEPTION 'awsflock: the pool %''s first row (slot -1) was deleted', p_lock
                USING ERRCODE = '55000';
        END IF;
        INSERT INTO {{T}} (lock_id, slot) VALUES (p_lock, -1) ON CONFLICT DO NOTHING;
        SELECT * INTO h FROM {{T}} WHERE lock_id = p_lock AND slot = -1 FOR UPDATE;
        v_has := true;
    END IF;
    IF v_has AND v_slot >= 0 AND p_op IN ('take', 'renew', 'end') THEN
        SELECT * INTO r FROM {{T}} WHERE lock_id = p_lock AND slot = v_slot FOR UPDATE;
        v_has_r := FOUND;
    ELSIF v_has THEN
        r := h;
        v_has_r := true;
    END IF;
    -- Whether the lock's own lease (h) and the step's (r: a pool slot's, else h) are free to
    -- take over at the cut: none, or ended or run out, and past its holder's lock-delay: a lease
    -- that ended without its holder's release (ran out, or forced: its end is the force) is
    -- kept until its end plus its delay_ms (the take's "delay_ms"; 0: none). A release has no
    -- delay.
    v_h_free := h.lease_id IS NULL OR (
        (h.ended <> '' OR h.expires_ms < v_cut)
        AND (h.ended = 'released' OR COALESCE(h.delay_ms, 0) = 0
             OR CASE WHEN h.ended <> '' THEN COALESCE(h.forced_ms, h.expires_ms)
                     ELSE h.expires_ms END + h.delay_ms < v_cut));
    v_r_free := NOT v_has_r OR r.lease_id IS NULL OR (
        (r.ended <> '' OR r.expires_ms < v_cut)
        AND (r.ended = 'released' OR COALESCE(r.delay_ms, 0) = 0
             OR CASE WHEN r.ended <> '' THEN COALESCE(r.forced_ms, r.expires_ms)
                     ELSE r.expires_ms END + r.delay_ms < v_cut));
    -- The lease a grant takes over, as it stands: how the lease before the grant ended, copied
    -- into the new lease's "prev" (a group's with its lapse and the share that ends last of
    -- those left, which a take drops: all that says how a group ended).
    IF p_op IN ('take', 'take_share') AND v_has_r AND r.lease_id IS NOT NULL THEN
        v_prev := jsonb_strip_nulls(jsonb_build_object('lease_id', r.lease_id, 'who', r.who,
                'ended', r.ended, 'expires_ms', r.expires_ms, 'forced_by', r.forced_by,
                'forced_reason', r.forced_reason, 'forced_ms', r.forced_ms))
            || CASE WHEN NOT r.shared THEN '{}'::jsonb
               ELSE jsonb_build_object('shared', true, 'shares', COALESCE((
                        SELECT jsonb_build_object(s.key, s.value) FROM jsonb_each(r.shares) s
                        ORDER BY (s.value->>'e')::bigint DESC LIMIT 1), '{}'))
                    || CASE WHEN r.lapse IS NULL THEN '{}'::jsonb
                       ELSE jsonb_build_object('lapse', r.lapse) END END;
    END IF;
    -- Places in line to remove, each only if its last poll is still the one the caller saw.
    v_gone := ARRAY(SELECT e->>0 FROM jsonb_array_elements(v_drop) e);
    v_line := h.line;

    -- take: grant the lease (acquire).
    --   lease, who (jsonb), lease_ms, sent (the caller's clock when sent: orders renews),
    --   slot, slots (a pool's slot and size; absent: the plain lock), ticket, number, drop (a
    --   fair waiter's place, its number, the lapsed places it removes: [[ticket, seen_ms], ...]),
    --   delay_ms (the holder's lock-delay, recorded with the lease; absent: 0), max_hold_ms (its
    --   max-hold: the cap, cap_ms, is the take's time plus it; absent or 0: none).
    --   Applied when the lease (or the pool slot) is free (v_h_free, v_r_free: past the lock-delay
    --   of a lease that ended unreleased), the id was never granted, barred or handed on here,
    --   and the line lets this caller in (no line, or its lapse, or the ticket with its number
    --   and every place to drop as the caller saw it). Writes the lease and its fencing token;
    --   the lease taken over goes to the table of leases handed on and the row's history.
    IF p_op = 'take' THEN
        v_ok := v_has AND (
            -- Never under a LEASE_ID barred or already handed on (a take landing late).
            NOT h.barred ? (p->>'lease')
            AND NOT EXISTS (
                SELECT 1 FROM {{D}} d WHERE d.lock_id = p_lock AND d.lease_id = p->>'lease')
            AND CASE WHEN v_slot < 0 THEN
                h.slots IS NULL AND v_h_free
                AND h.lease_id IS DISTINCT FROM p->>'lease'
                AND NOT h.history @> jsonb_build_array(jsonb_build_array(p->>'lease'))
            ELSE
                -- A slot's take that makes a plain lock a pool takes over its lease too.
                (h.slots = (p->>'slots')::integer OR (h.slots IS NULL AND v_h_free))
                AND (NOT v_has_r OR (
                    v_r_free
                    AND r.lease_id IS DISTINCT FROM p->>'lease'
                    AND NOT r.history @> jsonb_build_array(jsonb_build_array(p->>'lease'))))
            END);
        IF v_ticket IS NULL THEN
            v_ok := v_ok AND (h.line = '{}' OR h.polled_ms < v_cut - {{LAPSE}});
        ELSE
            -- The place as the waiter saw it: not dropped and joined again since (its number).
            v_ok := v_ok AND h.line ? v_ticket
                AND (p->>'number' IS NULL OR (h.line->v_ticket->>'n')::bigint = (p->>'number')::bigint)
                AND NOT EXISTS (
                SELECT 1 FROM jsonb_array_elements(v_drop) e
                WHERE (h.line->(e->>0)->>'seen')::bigint IS DISTINCT FROM (e->>1)::bigint);
            v_line := h.line - v_ticket - v_gone;
        END IF;
        IF v_ok AND h.shared THEN
            -- A group of shares ends with any grant: its shares are handed on with it.
            INSERT INTO {{D}} (lock_id, lease_id, ended, at_ms)
                SELECT p_lock, s.key, h.ended, v_now FROM jsonb_each(h.shares) s
                ON CONFLICT DO NOTHING;
            UPDATE {{T}} SET shared = false, shares = '{}', claim_ms = NULL, lapse = NULL
                WHERE lock_id = p_lock AND slot = -1 RETURNING * INTO h;
            IF v_slot < 0 THEN
                r := h;
            END IF;
        END IF;
        IF v_ok THEN
            IF v_slot >= 0 AND NOT v_has_r THEN
                INSERT INTO {{T}} (lock_id, slot) VALUES (p_lock, v_slot);
                SELECT * INTO r FROM {{T}} WHERE lock_id = p_lock AND slot = v_slot;
            END IF;
            IF r.lease_id IS NOT NULL THEN
                DELETE FROM {{D}} WHERE lock_id = p_lock AND at_ms < v_now - {{DONE_MS}};
                INSERT INTO {{D}} (lock_id, lease_id, ended, at_ms)
                    VALUES (p_lock, r.lease_id, r.ended, v_now) ON CONFLICT DO NOTHING;
            END IF;
            UPDATE {{T}} SET
                lease_id = p->>'lease',
                who = p->'who',
                lease_ms = (p->>'lease_ms')::bigint,
                -- Never past the hold's cap (the take's time plus its max_hold_ms; 0: none).
                expires_ms = v_now + LEAST((p->>'lease_ms')::bigint,
                    COALESCE(NULLIF((p->>'max_hold_ms')::bigint, 0), (p->>'lease_ms')::bigint)),
                cap_ms = v_now + NULLIF((p->>'max_hold_ms')::bigint, 0),
                acquired_ms = v_now,
                renewed_ms = (p->>'sent')::bigint,
                -- A new slot starts above its plain lock's tokens (rows are never deleted).
                fence = COALESCE(r.fence, GREATEST(v_now * 1000, COALESCE(h.fence, 0))) + 1,
                ended = '',
                history = jsonb_path_query_array(
                    CASE WHEN r.lease_id IS NULL THEN '[]'::jsonb
                    ELSE jsonb_build_array(jsonb_build_array(r.lease_id, r.ended)) END
                    || r.history, '$[0 to 2]'),
                prev = v_prev,  -- the lease taken over, as it stood (above)
                delay_ms = COALESCE((p->>'delay_ms')::bigint, 0),  -- the holder's lock-delay
                forced_by = NULL,
                forced_reason = NULL,
                forced_ms = NULL,
                keeper = ''
            WHERE lock_id = p_lock AND slot = v_slot
            RETURNING * INTO r;
            IF v_slot >= 0 OR v_line IS DISTINCT FROM h.line THEN
                UPDATE {{T}} SET
                    line = v_line,
                    slots = CASE WHEN v_slot >= 0 THEN (p->>'slots')::integer ELSE slots END
                WHERE lock_id = p_lock AND slot = -1
                RETURNING * INTO h;
            ELSE
                h := r;  -- the plain lock's row, written once
            END IF;
        END IF;

    -- renew: extend a held lease, and write the lock's state (awsflock.state) with it.
    --   lease, lease_ms, sent, order (how far apart two callers' readings must be to order
    --   them), slot, keeper (who keeps it alive, or absent), state and state_ms (the state's
    --   bytes, base64, and the holder's stamp; absent: no write; a plain lock's only).
    --   Applied when the lease is still held, not run out, in a pool still that large, and the
    --   new end is not earlier than the one a later renew set; with state, also when the
    --   state stored is not its lease's with a later stamp. A write whose renewal alone would
    --   move the end earlier is applied: the state is written, the lease left as it is.
    ELSIF p_op = 'renew' THEN
        v_ok := v_has_r AND r.lease_id = p->>'lease' AND r.ended = '' AND r.expires_ms > v_now
            AND CASE WHEN v_slot < 0 THEN h.slots IS NULL AND NOT h.shared
                ELSE h.slots > v_slot END
            -- A write that lands after a later one of its lease never undoes it (a retry, the
            -- same stamp, writes the same bytes again).
            AND NOT (v_state IS NOT NULL AND h.state_lease IS NOT DISTINCT FROM p->>'lease'
                     AND h.state_ms > (p->>'state_ms')::bigint);
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
            v_keep := NOT COALESCE(
                (p->>'sent')::bigint >= r.renewed_ms + COALESCE((p->>'order')::bigint, 0), false);
            v_ok := NOT v_keep OR v_state IS NOT NULL;  -- a write keeps the end (above)
        END IF;
        IF v_ok AND v_keep THEN
            UPDATE {{T}} SET state = v_state, state_lease = p->>'lease',
                state_ms = (p->>'state_ms')::bigint
            WHERE lock_id = p_lock AND slot = -1
            RETURNING * INTO h;
            r := h;
        ELSIF v_ok THEN
            UPDATE {{T}} SET
                expires_ms = LEAST(v_now + (p->>'lease_ms')::bigint,
                    COALESCE(cap_ms, v_now + (p->>'lease_ms')::bigint)),  -- never past the cap
                lease_ms = (p->>'lease_ms')::bigint,
                renewed_ms = GREATEST((p->>'sent')::bigint, renewed_ms),
                keeper = COALESCE(p->>'keeper', keeper),
                -- The state (v_state NULL: none written; a write is a plain lock's, slot -1).
                state = COALESCE(v_state, state),
                state_lease = CASE WHEN v_state IS NULL THEN state_lease ELSE p->>'lease' END,
                state_ms = CASE WHEN v_state IS NULL THEN state_ms
                    ELSE (p->>'state_ms')::bigint END
            WHERE lock_id = p_lock AND slot = v_slot
            RETURNING * INTO r;
            IF v_slot < 0 THEN
                h := r;
            END IF;
        END IF;

    -- end: release or force-release a lease.
    --   lease, slot, ended ("released" or "forced:ACTION"), forced_by, forced_reason, audit
    --   (a force-release's audit record: {"key": its key, "entry": the record}).
    --   Applied when the lease is still held (not yet ended, run out or not); a force's audit
    --   record is then written in the same transaction (it exists iff the force took effect).
    --   A lease id never seen here is barred instead ("barred"); one handed on answers with
    --   how it ended.
    ELSIF p_op = 'end' THEN
        v_ok := v_has_r AND r.lease_id = p->>'lease' AND r.ended = ''
            AND (v_slot >= 0 OR (h.slots IS NULL AND (NOT h.shared OR p ? 'forced_by')));
        IF v_ok THEN
            UPDATE {{T}} SET
                ended = p->>'ended',
                expires_ms = v_now,
                forced_by = COALESCE(p->>'forced_by', forced_by),
                forced_reason = COALESCE(p->>'forced_reason', forced_reason),
                forced_ms = CASE WHEN p ? 'forced_by' THEN v_now ELSE forced_ms END
            WHERE lock_id = p_lock AND slot = v_slot
            RETURNING * INTO r;
            IF v_slot < 0 THEN
                h := r;
            END IF;
            IF p ? 'audit' THEN
                INSERT INTO {{T}} (lock_id, slot, audit)
                    VALUES (p->'audit'->>'key', -1, p->'audit'->'entry')
                    ON CONFLICT (lock_id, slot) DO UPDATE SET audit = EXCLUDED.audit;
            END IF;
        ELSIF NOT h.barred ? (p->>'lease') AND NOT (v_has_r AND (
                r.lease_id IS NOT DISTINCT FROM p->>'lease'
                OR r.history @> jsonb_build_array(jsonb_build_array(p->>'lease'))))
              AND NOT EXISTS (
                SELECT 1 FROM {{D}} d WHERE d.lock_id = p_lock AND d.lease_id = p->>'lease') THEN
            v_barred := true;  -- nothing was ever granted here under this id (below)
        END IF;

    -- take_share: a share of the lock (awsflock.shares).
    --   lease (the share's id), group (the id of the group it starts), who, lease_ms, sent.
    --   Applied when the lock is free to take (a new group) or held by a group not ended with
    --   room for one more (a join); no writer's claim is live; the line is clear; the id was
    --   never granted, barred or handed on here. The share's token is one above the row's, and
    --   the group ends no earlier than the share; shares that ran out leave the group. A new
    --   group's "prev" is the lease it took over, as a take's; a join leaves the group's, and
    --   keeps the latest of the shares that ran out as the group's lapse, if it has none yet.
    ELSIF p_op = 'take_share' THEN
        v_free := v_h_free;
        v_ok := v_has AND h.slots IS NULL AND NOT h.barred ? (p->>'lease')
            AND NOT EXISTS (
                SELECT 1 FROM {{D}} d WHERE d.lock_id = p_lock AND d.lease_id = p->>'lease')
            AND NOT h.shares ? (p->>'lease') AND COALESCE(h.claim_ms, 0) <= v_now
            AND (h.line = '{}' OR h.polled_ms < v_cut - {{LAPSE}})
            AND CASE WHEN v_free THEN
                    h.lease_id IS DISTINCT FROM p->>'group'
                    AND NOT h.history @> jsonb_build_array(jsonb_build_array(p->>'group'))
                ELSE h.shared AND h.ended = '' AND (
                    SELECT count(*) FROM jsonb_each(h.shares) s
                    WHERE (s.value->>'e')::bigint >= v_cut) < {{MAX_SHARES}} END;
        IF v_ok THEN
            v_fence := GREATEST(v_now * 1000, COALESCE(h.fence, 0)) + 1;
            v_end := v_now + (p->>'lease_ms')::bigint;
            v_entry := jsonb_build_object('e', v_end, 'r', (p->>'sent')::bigint, 'a', v_now,
                'f', v_fence, 'd', (p->>'lease_ms')::bigint, 'who', p->'who');
            -- Shares that ran out, and a lease the new group takes over, are handed on.
            INSERT INTO {{D}} (lock_id, lease_id, ended, at_ms)
                SELECT p_lock, s.key, h.ended, v_now FROM jsonb_each(h.shares) s
                WHERE v_free OR (s.value->>'e')::bigint < v_cut
                UNION ALL SELECT p_lock, h.lease_id, h.ended, v_now
                WHERE v_free AND h.lease_id IS NOT NULL
                ON CONFLICT DO NOTHING;
            IF v_free THEN
                UPDATE {{T}} SET
                    lease_id = p->>'group', who = p->'who', lease_ms = (p->>'lease_ms')::bigint,
                    expires_ms = v_end, acquired_ms = v_now, renewed_ms = (p->>'sent')::bigint,
                    fence = v_fence, ended = '',
                    history = jsonb_path_query_array(
                        CASE WHEN h.lease_id IS NULL THEN '[]'::jsonb
                        ELSE jsonb_build_array(jsonb_build_array(h.lease_id, h.ended)) END
                        || h.history, '$[0 to 2]'),
                    forced_by = NULL, forced_reason = NULL, forced_ms = NULL, keeper = '',
                    shared = true, shares = jsonb_build_object(p->>'lease', v_entry),
                    claim_ms = NULL, prev = v_prev, lapse = NULL, delay_ms = 0,
                    cap_ms = NULL
                WHERE lock_id = p_lock AND slot = -1 RETURNING * INTO h;
            ELSE
                UPDATE {{T}} SET
                    fence = v_fence, expires_ms = GREATEST(expires_ms, v_end),
                    lapse = COALESCE(lapse, (
                        SELECT jsonb_build_object('lease_id', s.key, 'who', s.value->'who',
                            'ended', '', 'expires_ms', (s.value->>'e')::bigint)
                        FROM jsonb_each(shares) s WHERE (s.value->>'e')::bigint < v_cut
                        ORDER BY (s.value->>'e')::bigint DESC LIMIT 1)),
                    shares = COALESCE((SELECT jsonb_object_agg(s.key, s.value)
                        FROM jsonb_each(shares) s WHERE (s.value->>'e')::bigint >= v_cut), '{}')
                        || jsonb_build_object(p->>'lease', v_entry)
                WHERE lock_id = p_lock AND slot = -1 RETURNING * INTO h;
            END IF;
        END IF;

    -- renew_share: extend a share, as renew does a lease (lease, lease_ms, sent, order,
    --   keeper). Applied when the share is in a group not ended and not run out; the group
    --   ends no earlier than the share.
    ELSIF p_op = 'renew_share' THEN
        v_entry := CASE WHEN v_has THEN h.shares->(p->>'lease') END;
        v_ok := v_has AND h.shared AND h.ended = '' AND v_entry IS NOT NULL
            AND (v_entry->>'e')::bigint > v_now;
        IF v_ok AND (v_entry->>'e')::bigint - (v_entry->>'d')::bigint > v_now THEN
            v_now := (v_entry->>'e')::bigint - (v_entry->>'d')::bigint;
        END IF;
        IF v_ok AND v_now + (p->>'lease_ms')::bigint < (v_entry->>'e')::bigint THEN
            v_ok := COALESCE((p->>'sent')::bigint
                >= (v_entry->>'r')::bigint + COALESCE((p->>'order')::bigint, 0), false);
        END IF;
        IF v_ok THEN
            v_end := v_now + (p->>'lease_ms')::bigint;
            UPDATE {{T}} SET
                shares = jsonb_set(shares, ARRAY[p->>'lease'], v_entry || jsonb_build_object(
                    'e', v_end, 'd', (p->>'lease_ms')::bigint,
                    'r', GREATEST((p->>'sent')::bigint, (v_entry->>'r')::bigint))
                    || CASE WHEN p ? 'keeper' AND p->>'keeper' IS NOT NULL
                       THEN jsonb_build_object('k', p->>'keeper') ELSE '{}' END),
                expires_ms = GREATEST(expires_ms, v_end)
            WHERE lock_id = p_lock AND slot = -1 RETURNING * INTO h;
        END IF;

    -- end_share: release or force-release a share (lease, ended, forced_by, forced_reason,
    --   audit, as end). Applied when the share is in a group not ended: it leaves the group
    --   (handed on), and a group left with no share that has not run out ends as it did (else
    --   its end comes down to the latest of the shares left). An id never seen here is
    --   barred, as end bars a lease's. The group's lapse, if it has none yet: a share forced,
    --   else, where the group ends, the latest of the shares left (they ran out).
    ELSIF p_op = 'end_share' THEN
        v_ok := v_has AND h.shared AND h.ended = '' AND h.shares ? (p->>'lease');
        IF v_ok THEN
            v_left := COALESCE((SELECT jsonb_object_agg(s.key, s.value)
                FROM jsonb_each(h.shares - (p->>'lease')) s
                WHERE (s.value->>'e')::bigint >= v_cut), '{}');
            v_entry := h.shares->(p->>'lease');
            v_lapse := h.lapse;
            IF v_lapse IS NULL AND p ? 'forced_by' THEN
                v_lapse := jsonb_strip_nulls(jsonb_build_object('lease_id', p->>'lease',
                    'who', v_entry->'who', 'ended', p->>'ended',
                    'expires_ms', (v_entry->>'e')::bigint, 'forced_by', p->>'forced_by',
                    'forced_reason', p->>'forced_reason', 'forced_ms', v_now));
            END IF;
            IF v_lapse IS NULL AND v_left = '{}' THEN
                v_lapse := (SELECT jsonb_build_object('lease_id', s.key, 'who', s.value->'who',
                        'ended', '', 'expires_ms', (s.value->>'e')::bigint)
                    FROM jsonb_each(h.shares - (p->>'lease')) s
                    ORDER BY (s.value->>'e')::bigint DESC LIMIT 1);
            END IF;
            INSERT INTO {{D}} (lock_id, lease_id, ended, at_ms)
                SELECT p_lock, p->>'lease', p->>'ended', v_now
                UNION ALL SELECT p_lock, s.key, '', v_now FROM jsonb_each(h.shares) s
                WHERE v_left = '{}' AND s.key <> p->>'lease'
                ON CONFLICT DO NOTHING;
            UPDATE {{T}} SET
                shares = CASE WHEN v_left = '{}' THEN '{}' ELSE shares - (p->>'lease') END,
                ended = CASE WHEN v_left = '{}' THEN p->>'ended' ELSE ended END,
                -- Else the group's end comes down to the latest of the shares left.
                expires_ms = CASE WHEN v_left = '{}' THEN v_now ELSE (
                    SELECT max((s.value->>'e')::bigint)
                    FROM jsonb_each(h.shares - (p->>'lease')) s) END,
                forced_by = CASE WHEN v_left = '{}' THEN p->>'forced_by' ELSE forced_by END,
                forced_reason = CASE WHEN v_left = '{}' THEN p->>'forced_reason'
                    ELSE forced_reason END,
                forced_ms = CASE WHEN v_left = '{}' AND p ? 'forced_by' THEN v_now
                    ELSE forced_ms END,
                lapse = v_lapse
            WHERE lock_id = p_lock AND slot = -1 RETURNING * INTO h;
            IF p ? 'audit' THEN
                INSERT INTO {{T}} (lock_id, slot, audit)
                    VALUES (p->'audit'->>'key', -1, p->'audit'->'entry')
                    ON CONFLICT (lock_id, slot) DO UPDATE SET audit = EXCLUDED.audit;
            END IF;
        ELSIF v_has AND NOT h.barred ? (p->>'lease') AND NOT h.shares ? (p->>'lease')
              AND NOT EXISTS (
                SELECT 1 FROM {{D}} d WHERE d.lock_id = p_lock AND d.lease_id = p->>'lease') THEN
            v_barred := true;  -- as end's (below)
        END IF;

    -- claim: a waiting exclusive acquire keeps new shares out (for: how long, ms; until: never
    --   past this time, as the caller reckons the step's clock: a claim that lands late ends with
    --   the wait it was made for). Applied when the lock is held by a group not ended, and the
    --   claim only grows.
    ELSIF p_op = 'claim' THEN
        v_end := v_now + (p->>'for')::bigint;
        v_end := LEAST(v_end, COALESCE((p->>'until')::bigint, v_end));
        v_ok := v_has AND h.shared AND h.ended = '' AND h.slots IS NULL
            AND COALESCE(h.claim_ms, 0) < v_end AND v_end > v_now;
        IF v_ok THEN
            UPDATE {{T}} SET claim_ms = v_end
            WHERE lock_id = p_lock AND slot = -1 RETURNING * INTO h;
        END IF;

    -- join: take a place in the lock's line of fair waiters.
    --   ticket, who (jsonb), since (when the caller began waiting; absent: now).
    --   Applied when the lock's row exists and the ticket has no place yet.
    ELSIF p_op = 'join' THEN
        v_ok := v_has AND NOT h.line ? v_ticket;
        IF v_ok THEN
            UPDATE {{T}} SET
                line = line || jsonb_build_object(v_ticket, jsonb_build_object(
                    'n', next_number, 'who', p->'who',
                    'since', COALESCE((p->>'since')::bigint, v_now), 'seen', v_now)),
                next_number = next_number + 1,
                polled_ms = GREATEST(polled_ms, v_now)
            WHERE lock_id = p_lock AND slot = -1
            RETURNING * INTO h;
        END IF;

    -- beat: a waiter says it still waits, and removes lapsed places ahead of it.
    --   ticket, drop ([[ticket, seen_ms], ...]).
    --   Applied when the place exists, its last beat is older than now, and each place to drop
    --   is as the caller saw it.
    ELSIF p_op = 'beat' THEN
        v_ok := v_has AND h.line ? v_ticket
            AND (h.line->v_ticket->>'seen')::bigint < v_now
            AND NOT EXISTS (
                SELECT 1 FROM jsonb_array_elements(v_drop) e
                WHERE (h.line->(e->>0)->>'seen')::bigint IS DISTINCT FROM (e->>1)::bigint);
        IF v_ok THEN
            UPDATE {{T}} SET
                line = jsonb_set(line, ARRAY[v_ticket, 'seen'], to_jsonb(v_now)) - v_gone,
                polled_ms = GREATEST(polled_ms, v_now)
            WHERE lock_id = p_lock AND slot = -1
            RETURNING * INTO h;
        END IF;

    -- leave: give up a place in line.
    --   ticket. Applied when the place exists.
    ELSIF p_op = 'leave' THEN
        v_ok := v_has AND h.line ? v_ticket;
        IF v_ok THEN
            UPDATE {{T}} SET line = line - v_ticket WHERE lock_id = p_lock AND slot = -1
            RETURNING * INTO h;
        END IF;

    -- resize: make the lock a pool of "new" slots, or change a pool's size.
    --   old (the size the caller saw; absent: a plain lock), new.
    --   Applied when the size is still "old", a plain lock's lease is free, and no slot that
    --   would be cut off is held.
    ELSIF p_op = 'resize' THEN
        v_ok := h.slots IS NOT DISTINCT FROM (p->>'old')::integer
            AND (h.slots IS NOT NULL OR v_h_free)
            AND NOT EXISTS (
                SELECT 1 FROM {{T}} s WHERE s.lock_id = p_lock
                AND s.slot >= (p->>'new')::integer AND s.slot < COALESCE(h.slots, 0)
                AND NOT (s.lease_id IS NULL OR (
                    (s.ended <> '' OR s.expires_ms < v_cut)
                    AND (s.ended = 'released' OR s.delay_ms = 0
                         OR CASE WHEN s.ended <> '' THEN COALESCE(s.forced_ms, s.expires_ms)
                                 ELSE s.expires_ms END + s.delay_ms < v_cut))));
        IF v_ok THEN
            UPDATE {{T}} SET slots = (p->>'new')::integer WHERE lock_id = p_lock AND slot = -1
            RETURNING * INTO h;
        END IF;

    -- read: no branch of its own: nothing is written (no row locked), the answer is all
    --   (lease: the answer says how that lease ended, if it was handed on). Any other step is
    --   an error.
    ELSIF p_op <> 'read' THEN
        RAISE EXCEPTION 'awsflock: unknown step %', p_op USING ERRCODE = '22023';
    END IF;

    -- An end step whose lease id nothing here was ever granted under (nor a share): a take of
    -- it may still be on its way (an acquire that gave up with its answer lost), so the id is
    -- barred on the lock's row, that take refused whenever it lands (within a day, however
    -- many are barred), and the lock never held by nobody.
    IF v_barred THEN
        UPDATE {{T}} SET barred = COALESCE((
            SELECT jsonb_object_agg(b.key, b.value) FROM jsonb_each(barred) b
            WHERE (b.value #>> '{}')::bigint >= v_now - {{RETAIN}}), '{}')
            || jsonb_build_object(p->>'lease', v_now)
        WHERE lock_id = p_lock AND slot = -1
        RETURNING * INTO h;
    END IF;

    -- How a refused renew's or end's lease ended, or a read's named one, if it was handed on
    -- (only then is the table of those read: a role with the read-only grants has no right
    -- to it, and status names no lease).
    IF NOT COALESCE(v_ok, false) AND p ? 'lease'
       AND p_op IN ('renew', 'end', 'read', 'renew_share', 'end_share') THEN
        SELECT d.ended INTO v_ended FROM {{D}} d
        WHERE d.lock_id = p_lock AND d.lease_id = p->>'lease';
    END IF;
    RETURN jsonb_build_object(
        'applied', COALESCE(v_ok, false),
        'barred', v_barred,
        'ended', v_ended,
        'now', v_now,
        'rows', CASE
            WHEN NOT v_has THEN '[]'::jsonb
            -- A plain lock (never a pool: a pool stays one) has its one row, as it is now.
            WHEN h.slots IS NULL THEN jsonb_build_array(to_jsonb(h) - c_hidden)
            ELSE (SELECT COALESCE(jsonb_agg(to_jsonb(t) - c_hidden ORDER BY t.slot), '[]')
                  FROM {{T}} t WHERE t.lock_id = p_lock)
        END);
END
$body$
