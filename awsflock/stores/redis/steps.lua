-- awsflock's Redis step script: every lock step is one call of it (EVALSHA), atomic, on the
-- server's clock. Loaded by awsflock/stores/redis/layout.py (script()), which fills in the
-- placeholders below (names in double braces) with the protocol's constants (integers); its
-- requests are program.py's, sent by link.py. Lua 5.1, as Redis runs it (cjson, redis.call).
-- Checked: tests/test_step_programs.py runs every step on a real redis-server (and parses this
-- file as Lua 5.1 where there is none); the pre-commit hook "step-programs" runs that file.
--
-- KEYS (all of one lock, one hash slot; layout.py says what each holds):
--   KEYS[1] P:{NAME}:lock    hash: the plain lease "p", a pool's "slots" and leases "s:N", the
--                            line of fair waiters "w:TICKET", "next", "polled"; a lock held
--                            shared: "shared", its shares "r:LEASE_ID", a writer's "claim",
--                            the group's "lapse" (its first share found ended unreleased)
--   KEYS[2] P:{NAME}:fence   hash: "token" (highest fencing token granted), "granted" (when),
--                            "last" (the plain lease's or group's grant and end, or the group's
--                            lapse, which outlive the lock's hash: how the lease before a grant
--                            ended, once that is gone), the lock's state (awsflock/state.py):
--                            "state" (base64 text), "state_lease" (the lease that wrote it),
--                            "state_ms" (its stamp): kept here, it outlives the lock's hash too
--   KEYS[3] P:{NAME}:bars    sorted set: lease ids an end step found holding nothing here
--   KEYS[4] P:{NAME}:done    sorted set: lease ids taken over, scored when * 4 + how
--   KEYS[5] P:{NAME}:forced  hash: the force-released ones among them -> "forced:ACTION"
--   KEYS[6] P:{NAME}:audit:KEY  a force-release's audit record (string of JSON): end only
-- ARGV[1]: the step: take, renew, end, join, beat, leave, resize, read or state; a share's step,
--   take_share, renew_share, end_share or claim (awsflock/shares.py: "p" is then the group's
--   lease); or a set's step, take_all, renew_all or end_all (see all() at the end: KEYS then
--   hold several locks').
-- ARGV[2]: its parameters, a JSON object. Every step may have:
--   now, skew  the caller's clock and skew window (ms); absent: the server's TIME, skew 0
--   touch      true: write KEYS[2]'s "touched" after the step, so WAIT / WAITAOF that follow
--              have a write of this connection to wait for
-- and each step its own, listed above its branch below.
--
-- Every check is made before the first write, so a refusal (or an error: a key of another
-- type, a user not allowed a write) changes nothing, but for one: an end step whose lease id
-- the lock never saw bars the id (answer 2).
--
-- Answer, every step:
--   {1, now, FIELDS}          applied
--   {2, now, FIELDS}          an end step not applied that barred its lease id
--   {0, now, FIELDS, ENDED}   not applied; ENDED: how the step's lease id ended if it was
--                             taken over here ("released", "forced:ACTION", "" ran out), for
--                             a refused renew or end, or a read naming a lease; else false
--   {-1, now, GRANTED}        a take refused because the server's clock reads earlier than
--                             the lock's last grant (GRANTED, ms): it was stepped back
--   {1, now, {}, false, {STATE, LEASE, MS}}  the state step: KEYS[2]'s three fields (nil: none
--                             written)
-- now: the step's time (ms, a string); FIELDS: KEYS[1]'s fields after the step, flat
-- (field, value, field, value ...). Errors: NOPERM (a write the user may not make), WRONGTYPE
-- (a key of another type), ERR (an unknown step, or arguments out of range).

-- Filled in by layout.script() (ms, or a count): protocol.LINE_LAPSE_MS, layout.RETAIN_MS,
-- layout.HISTORY_MS, layout.HISTORY_KEEP, protocol.DONE_MS, shares.MAX_SHARES, and STATE: the
-- longest state as sent (the base64 text of state.MAX_STATE bytes).
local LAPSE = {{LAPSE}}
local RETAIN = {{RETAIN}}
local HISTORY = {{HISTORY}}
local KEEP = {{KEEP}}
local DONE = {{DONE}}
local MAX_SHARES = {{MAX_SHARES}}
local STATE = {{STATE}}
local function s(n) return string.format('%.0f', n) end

-- The step's clock: the server's TIME (skew 0), or the caller's (p.now, p.skew).
local function clock_of(p)
    if p.now == nil then
        local t = redis.call('TIME')
        return {server = true, skew = 0,
                now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
    end
    return {server = false, now = tonumber(p.now), skew = tonumber(p.skew or 0)}
end

-- What would make a step fail half-way, refused before its first write: a user whose ACL
-- allows some of the writes but not others, a key of another type under a lock's names.
local function usable(KEYS, op)
    if op ~= 'read' and redis.acl_check_cmd then
        for _, check in ipairs({{'HSET', KEYS[1], 'f', 'v'}, {'HDEL', KEYS[1], 'f'},
                                {'PEXPIREAT', KEYS[1], '1'}, {'PERSIST', KEYS[1]},
                                {'HSET', KEYS[2], 'f', 'v'}, {'ZADD', KEYS[3], '1', 'x'},
                                {'ZREMRANGEBYSCORE', KEYS[3], '0', '1'},
                                {'PEXPIREAT', KEYS[3], '1'}, {'ZADD', KEYS[4], '1', 'x'},
                                {'ZREMRANGEBYSCORE', KEYS[4], '0', '1'},
                                {'PEXPIREAT', KEYS[4], '1'}, {'HSET', KEYS[5], 'f', 'v'},
                                {'PEXPIREAT', KEYS[5], '1'}, KEYS[6] and {'SET', KEYS[6], 'v'}}) do
            if not redis.acl_check_cmd(unpack(check)) then
                return redis.error_reply('NOPERM awsflock: this user may not run ' .. check[1]
                                         .. ' on ' .. check[2])
            end
        end
    end

    if op ~= 'read' then
        local kinds = {'hash', 'hash', 'zset', 'zset', 'hash', 'string'}
        for i = 1, #KEYS do
            local kind = kinds[i]
            local found = redis.call('TYPE', KEYS[i]).ok
            if found ~= 'none' and found ~= kind then
                return redis.error_reply('WRONGTYPE awsflock: ' .. KEYS[i] .. ' holds a ' .. found)
            end
        end
    end

    return nil
end

-- One lock's step (KEYS: its keys; op, p: as above). dry: a take that would be applied
-- answers true and writes nothing (a set's first pass, see all()).
local function step(KEYS, op, p, clock, dry)
    -- A renew that writes the state is sent as renew_state (as to PostgreSQL's step function,
    -- where an older one answers it "unknown step" instead of dropping the state unsaid).
    if op == 'renew_state' and p.state ~= nil then
        op = 'renew'
    elseif op == 'renew_state' or p.state ~= nil then
        return redis.error_reply('ERR awsflock: bad arguments for step ' .. op)
    end
    local server, now, skew = clock.server, clock.now, clock.skew
    local cut = now - skew

    local flat = redis.call('HGETALL', KEYS[1])
    local h = {}
    for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
    local has = #flat > 0
    local fence = redis.call('HMGET', KEYS[2], 'token', 'granted', 'last')

    local function lease(field)
        local text = h[field]
        if text == nil then return nil end
        return cjson.decode(text)
    end
    -- Whether the lease "l" is free to take over at the cut: none, or ended or run out, and
    -- past its holder's lock-delay ("dl", ms; absent: none): a lease that ended without its
    -- holder's release (ran out, or forced: its end is the force) is kept until its end plus
    -- the delay. A release has none.
    local function free(l)
        if l == nil then return true end
        if l.ended == '' and tonumber(l.exp) >= cut then return false end
        local delay = tonumber(l.dl or 0)
        if delay == 0 or l.ended == 'released' then return true end
        local ended_at = l.exp
        if l.ended ~= '' and l.fms ~= nil then ended_at = l.fms end
        return tonumber(ended_at) + delay < cut
    end
    -- How a lease id taken over here ended ("released", "forced:", ""), nil if it was not.
    local function done(id)
        local score = redis.call('ZSCORE', KEYS[4], id)
        if not score then return nil end
        local how = tonumber(score) % 4
        if how == 1 then return 'released' end
        if how == 2 then return redis.call('HGET', KEYS[5], id) or 'forced:' end
        return ''
    end
    local function granted(l, id)
        if l ~= nil then
            if l.lease == id then return true end
            for _, old in ipairs(l.hist or {}) do
                if old[1] == id then return true end
            end
        end
        return done(id) ~= nil
    end
    -- A lease id an end step found holding nothing here: a take of it that lands later is refused.
    local function barred(id)
        return redis.call('ZSCORE', KEYS[3], id) ~= false
    end
    local function unchanged(drop)
        for _, d in ipairs(drop or {}) do
            local place = h['w:' .. d[1]]
            if place == nil or cjson.decode(place).seen ~= s(tonumber(d[2])) then return false end
        end
        return true
    end
    local function line_clear()
        for field, _ in pairs(h) do
            if string.sub(field, 1, 2) == 'w:' then
                return h.polled ~= nil and tonumber(h.polled) < cut - LAPSE
            end
        end
        return true
    end
    local function set(field, value) h[field] = value; redis.call('HSET', KEYS[1], field, value) end
    local function del(field) h[field] = nil; redis.call('HDEL', KEYS[1], field) end
    -- A lease id taken over (or a share ended) here, as it ended: kept in KEYS[4] (and KEYS[5]
    -- if forced) for DONE, so a renew or end of it that comes later learns how. An id already
    -- kept keeps its first entry.
    local function remember(id, ended)
        local how = 3
        if ended == 'released' then how = 1
        elseif string.sub(ended, 1, 7) == 'forced:' then how = 2 end
        redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. s((now - DONE) * 4))
        redis.call('ZADD', KEYS[4], 'NX', s(now * 4 + how), id)
        if server then redis.call('PEXPIREAT', KEYS[4], s(now + DONE)) end
        if how == 2 then
            redis.call('HSET', KEYS[5], id, ended)
            if server then redis.call('PEXPIREAT', KEYS[5], s(now + DONE)) end
        end
    end
    -- The shares of the lock held shared ({id = entry}), and those of them live at the cut.
    local function shares()
        local all, live, n = {}, {}, 0
        for f, v in pairs(h) do
            if string.sub(f, 1, 2) == 'r:' then
                local e = cjson.decode(v)
                all[string.sub(f, 3)] = e
                if tonumber(e.e) >= cut then live[string.sub(f, 3)] = e; n = n + 1 end
            end
        end
        return all, live, n
    end
    -- A grant on a lock once held shared: the group's shares are handed on with it, as the
    -- group ended, and the lock is no longer held shared.
    local function end_group(ended)
        for id, _ in pairs((shares())) do remember(id, ended); del('r:' .. id) end
        if h.shared ~= nil then del('shared') end
        if h.claim ~= nil then del('claim') end
        if h.lapse ~= nil then del('lapse') end
    end
    -- The share that ends last of "some" ({id = entry}): its id and entry (nil: none).
    local function latest(some)
        local found, last = nil, nil
        for id, one in pairs(some) do
            if last == nil or tonumber(one.e) > tonumber(last.e) then found, last = id, one end
        end
        return found, last
    end
    -- The lease "r" a grant takes over, as it stands: how the lease before the grant ended (the
    -- new lease's "prev"); a group's ("group") with its lapse and the share that ends last of
    -- those left (all that says how a group ended), so call it before end_group drops them.
    -- No lease: the fence's "last" (where the hash is gone, expired a day after its last lease;
    -- without its end, as renewals do not write it), if "fallback".
    local function taken_over(r, group, fallback)
        if r == nil or r.lease == '' then
            if fallback and fence[3] then return cjson.decode(fence[3]) end
            return {}
        end
        local prev = {lease = r.lease, who = r.who, ended = r.ended, exp = r.exp,
                      fby = r.fby, fwhy = r.fwhy, fms = r.fms}
        if group then
            local id, one = latest((shares()))
            prev.shared, prev.shares = true, {}
            if id ~= nil then prev.shares[id] = one end
            if h.lapse ~= nil then prev.lapse = cjson.decode(h.lapse) end
        end
        return prev
    end
    -- The share "id" ("one", its entry) found ended without its holder's release (ran out, or
    -- forced by this step): the group's "lapse", in a lease's form, if it has none yet.
    local function lapse(id, one, forced)
        if id == nil or h.lapse ~= nil then return end
        local l = {lease = id, who = one.who, ended = '', exp = one.e}
        if forced then
            l.ended, l.fby, l.fwhy, l.fms = p.ended, p.forced_by, p.forced_reason, s(now)
        end
        set('lapse', cjson.encode(l))
    end
    -- The lease "r" (in "field") taken over by a grant: remembered, and the record's history
    -- (returned): it, then the ones before it: the last three, and any older that ended within
    -- HISTORY (at most KEEP), so a release retried after many quick hand-offs still finds what
    -- its first try did.
    local function hand_on(r)
        if r == nil or r.lease == '' then return {} end
        remember(r.lease, r.ended)
        local hist = {{r.lease, r.ended, s(now)}}
        for _, old in ipairs(r.hist or {}) do
            if #hist >= KEEP then break end
            local at = tonumber(old[3] or 0)
            if #hist >= 3 and at < now - HISTORY then break end
            hist[#hist + 1] = old
        end
        return hist
    end
    -- An end step's lease id that nothing here was ever granted under (nor a share): a take of
    -- it may still be on its way (an acquire that gave up with its answer lost), so the id is
    -- barred, that take refused whenever it lands (within RETAIN), and the lock never held by
    -- nobody. True if it was barred now.
    local function bar_if_unseen(l)
        if granted(l, p.lease) or barred(p.lease) or h['r:' .. p.lease] ~= nil then return false end
        redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. s(now - RETAIN))
        redis.call('ZADD', KEYS[3], s(now), p.lease)
        if server then redis.call('PEXPIREAT', KEYS[3], s(now + RETAIN)) end
        return true
    end
    -- A force-release's audit record (KEYS[6]), written by the step that ends its lease: it
    -- exists iff the force took effect.
    local function write_audit()
        if p.audit ~= nil and KEYS[6] then redis.call('SET', KEYS[6], p.audit) end
    end
    -- The lease "l" (in "field") ended by an end step: released, or forced (by whom, why).
    local function finish(l, f)
        l.ended, l.exp = p.ended, s(now)
        if p.forced_by ~= nil then l.fby, l.fwhy, l.fms = p.forced_by, p.forced_reason, s(now) end
        set(f, cjson.encode(l))
        if f == 'p' then
            redis.call('HSET', KEYS[2], 'last', cjson.encode({lease = l.lease, who = l.who,
                       ended = l.ended, fby = l.fby, fwhy = l.fwhy, fms = l.fms}))
        end
        write_audit()
    end
    local function polled(at)
        if h.polled == nil or tonumber(h.polled) < at then set('polled', s(at)) end
    end
    -- After a write: a pool's hash is kept; a plain lock's goes RETAIN after nothing in it can
    -- matter (its leases' ends, its line's lapse). Only on the server's clock: a caller's clock
    -- (tests, simulations) may be anywhere.
    local function collect()
        if h.slots ~= nil then redis.call('PERSIST', KEYS[1]); return end
        if not server then return end
        local last = 0
        for field, value in pairs(h) do
            if field == 'p' or string.sub(field, 1, 2) == 's:' then
                local l = cjson.decode(value)  -- kept past its end plus its lock-delay too
                last = math.max(last, tonumber(l.exp) + tonumber(l.dl or 0))
            end
        end
        if h.polled ~= nil then last = math.max(last, tonumber(h.polled) + LAPSE) end
        redis.call('PEXPIREAT', KEYS[1], s(math.max(last, now) + RETAIN))
    end


    local bad = usable(KEYS, op)
    if bad then return bad end

    local slot = p.slot
    local field = 'p'
    if slot ~= cjson.null and slot ~= nil then field = 's:' .. s(slot) else slot = nil end
    -- Arguments the library never sends, refused before anything is written: a slot below 0 (or
    -- not a whole number), a pool's slot taken without the pool's size above it, a resize to no
    -- slots, a state but with a plain lock's renew (as text no longer than STATE, stamped).
    local function whole(x) return type(x) == 'number' and x % 1 == 0 end
    if (slot ~= nil and not (whole(slot) and slot >= 0))
        or (op == 'take' and slot ~= nil and not (whole(p.slots) and p.slots > slot))
        or (op == 'resize' and not (whole(p.new) and p.new >= 1))
        or (p.state ~= nil and (op ~= 'renew' or slot ~= nil or type(p.state) ~= 'string'
                                or #p.state > STATE or not whole(p.state_ms))) then
        return redis.error_reply('ERR awsflock: bad arguments for step ' .. op)
    end
    local ok = false
    -- An end step that barred its lease id (it held nothing here): written, though not applied.
    local bar = false
    -- Whether the step, applied, may let a waiter in: then the waiters are told (below).
    local wake = false

    -- take: grant the lease (acquire).
    --   lease, who (JSON text), lease_ms, sent (the caller's clock when sent: orders renews),
    --   slot, slots (a pool's slot and size; absent: the plain lock), ticket, number, drop (a
    --   fair waiter's place, its number, the lapsed places it removes: [[ticket, seen_ms], ...]),
    --   delay_ms (the holder's lock-delay, kept with the lease as "dl"; absent or 0: none),
    --   max_hold_ms (its max-hold: the cap, "cap", is the take's time plus it; absent or 0:
    --   none; no take or renewal sets "exp" past it).
    --   Applied when the lease (or the pool slot) is free (free(): past the lock-delay of a lease
    --   that ended unreleased; a slot's take that makes a plain lock a pool, of its lease too),
    --   the id was never granted, barred or taken over here, and the line lets this caller in
    --   (no line, or its lapse, or the ticket with its number and every place to drop as the
    --   caller saw it). Writes the lease, the fence's token; the lease taken over goes to
    --   KEYS[4] (and KEYS[5] if forced) and the record's "hist".
    if op == 'take' then
        local top = lease('p')
        local r = lease(field)
        if slot == nil then
            ok = h.slots == nil and free(top) and not granted(top, p.lease)
        else
            local size_ok = (h.slots ~= nil and tonumber(h.slots) == tonumber(p.slots))
                or (h.slots == nil and free(top))
            ok = size_ok and free(r) and not granted(r, p.lease)
        end
        ok = ok and not barred(p.lease)
        local ticket = p.ticket
        if ticket == cjson.null or ticket == nil then
            ok = ok and line_clear()
        else
            -- The place as the waiter saw it: not dropped and joined again since (its number).
            local place = h['w:' .. ticket] and cjson.decode(h['w:' .. ticket])
            ok = ok and place and (p.number == nil or p.number == cjson.null
                                   or tonumber(place.n) == tonumber(p.number)) and unchanged(p.drop)
        end
        if ok and server and fence[2] and now < tonumber(fence[2]) then
            return {-1, s(now), fence[2]}
        end
        if ok and dry then return true end
        if ok then
            local token = math.max(now * 1000, tonumber(fence[1] or 0)) + 1
            -- The lease taken over, as it stood: how the lease before this one ended.
            local prev = taken_over(r, slot == nil and h.shared ~= nil, slot == nil)
            if h.shared ~= nil then end_group(top.ended) end
            local hist = hand_on(r)
            local exp = now + p.lease_ms
            local new = {lease = p.lease, who = p.who, ms = s(p.lease_ms), exp = s(exp),
                         acq = s(now), fence = s(token), ended = '', keeper = '', prev = prev}
            if type(p.max_hold_ms) == 'number' and p.max_hold_ms > 0 then
                new.cap = s(now + p.max_hold_ms)
                new.exp = s(math.min(exp, now + p.max_hold_ms))
            end
            if p.sent ~= nil then new.rs = s(p.sent) end
            if #hist > 0 then new.hist = hist end
            if type(p.delay_ms) == 'number' and p.delay_ms > 0 then new.dl = s(p.delay_ms) end
            set(field, cjson.encode(new))
            if slot ~= nil then set('slots', s(p.slots)) end
            if ticket ~= cjson.null and ticket ~= nil then
                del('w:' .. ticket)
                for _, d in ipairs(p.drop or {}) do del('w:' .. d[1]) end
                wake = slot ~= nil  -- the next in line may take another free slot
            end
            redis.call('HSET', KEYS[2], 'token', s(token), 'granted', s(now))
            if slot == nil then
                redis.call('HSET', KEYS[2], 'last', cjson.encode({lease = p.lease, who = p.who,
                           ended = ''}))
            end
        end

    -- renew: extend a held lease, and write the lock's state with it.
    --   lease, lease_ms, sent, order (how far apart two callers' readings must be to order
    --   them), slot, keeper (who keeps it alive, or absent), state and state_ms (a plain lock's
    --   state, base64 text, and its stamp; absent: none written).
    --   Applied when the lease is still held, not run out, in a pool still that large, and the new
    --   end is not earlier than the one a later renew set. With a state, also when only that
    --   last fails (the state is written, the end stays), and not where the state was written by
    --   this lease with a later stamp (this write landed late). The state goes to KEYS[2].
    elseif op == 'renew' then
        local l = lease(field)
        local in_pool = (slot == nil and h.slots == nil and h.shared == nil)
            or (slot ~= nil and h.slots ~= nil and tonumber(h.slots) > slot)
        ok = l ~= nil and l.lease == p.lease and l.ended == '' and tonumber(l.exp) > now and in_pool
        if ok and p.state ~= nil then
            local kept = redis.call('HMGET', KEYS[2], 'state_lease', 'state_ms')
            ok = kept[1] ~= p.lease or tonumber(kept[2]) <= p.state_ms
        end
        local from = now
        -- A renew made before the lease's grant or latest renew (the caller's clock) counts from
        -- that one's time.
        if ok and tonumber(l.exp) - tonumber(l.ms) > now then
            from = tonumber(l.exp) - tonumber(l.ms)
        end
        -- Only a renew sent after the one that set the end may move it back: one that lands late,
        -- after a later renew extended the lease further, must not shorten what that one's caller
        -- was told (its own caller learns the lease is held at least as long as it asked). The
        -- callers' clock readings order them (``rs``) only a whole window (``order``) apart: within
        -- it, a clock ahead could make the renew sent first look later.
        local extend = ok
        if ok and from + p.lease_ms < tonumber(l.exp) then
            extend = p.sent ~= nil and l.rs ~= nil
                and tonumber(p.sent) >= tonumber(l.rs) + tonumber(p.order or 0)
            ok = extend or p.state ~= nil  -- a state write never shortens: the end stays
        end
        if ok and p.state ~= nil then
            redis.call('HSET', KEYS[2], 'state', p.state, 'state_lease', p.lease,
                       'state_ms', s(p.state_ms))
        end
        if extend then
            l.exp = s(from + p.lease_ms)
            if l.cap then l.exp = s(math.min(from + p.lease_ms, tonumber(l.cap))) end  -- the cap
            l.ms = s(p.lease_ms)
            if p.sent ~= nil then l.rs = s(math.max(tonumber(p.sent), tonumber(l.rs or 0))) end
            if p.keeper ~= cjson.null and p.keeper ~= nil then l.keeper = p.keeper end
            set(field, cjson.encode(l))
        end

    -- end: release or force-release a lease.
    --   lease, slot, ended ("released" or "forced:ACTION"), forced_by, forced_reason, audit (a
    --   force-release's audit record, JSON text, written at KEYS[6] when applied: it exists iff
    --   the force took effect).
    --   Applied when the lease is still held (not yet ended, run out or not). A lease id never
    --   seen here is barred instead (answer 2); one taken over answers 0 with how it ended.
    elseif op == 'end' then
        local l = lease(field)
        ok = l ~= nil and l.lease == p.lease and l.ended == ''
            and (slot ~= nil or (h.slots == nil and (h.shared == nil or p.forced_by ~= nil)))
        wake = true
        if ok then
            finish(l, field)
        else
            bar = bar_if_unseen(l)
        end

    -- take_share: a share of the lock (awsflock.shares).
    --   lease (the share's id), group (the id of the group it starts), who, lease_ms, sent.
    --   Applied when the lock is free to take (a new group) or held by a group not ended with
    --   room for one more (a join); no writer's claim is live; the line is clear; the ids were
    --   never granted, barred or handed on here. The share's token is one above the lock's, and
    --   the group ends no earlier than the share; shares that ran out leave the group (the
    --   latest of them is its lapse, if it has none yet). A new group's "prev" is the lease it
    --   took over, as a take's (a join leaves the group's), and it is the fence's "last".
    elseif op == 'take_share' then
        local top = lease('p')
        local open = free(top)
        local all, _, n = shares()
        ok = h.slots == nil and not barred(p.lease) and not granted(top, p.lease)
            and h['r:' .. p.lease] == nil and tonumber(h.claim or 0) <= now and line_clear()
        if open then
            ok = ok and not granted(top, p.group)
        else
            ok = ok and h.shared ~= nil and top.ended == '' and n < MAX_SHARES
        end
        if ok and server and fence[2] and now < tonumber(fence[2]) then
            return {-1, s(now), fence[2]}
        end
        if ok then
            local token = math.max(now * 1000, tonumber(fence[1] or 0)) + 1
            local e, sent = now + p.lease_ms, s(p.sent or now)
            if open then
                local prev = taken_over(top, h.shared ~= nil, true)
                if h.shared ~= nil then end_group(top.ended) end
                local hist = hand_on(top)
                top = {lease = p.group, who = p.who, ms = s(p.lease_ms), exp = s(e), acq = s(now),
                       fence = s(token), ended = '', keeper = '', rs = sent, prev = prev}
                if #hist > 0 then top.hist = hist end
                set('shared', '1')
                redis.call('HSET', KEYS[2], 'last', cjson.encode({lease = p.group, who = p.who,
                           ended = ''}))
            else
                local ran_out = {}
                for id, one in pairs(all) do
                    if tonumber(one.e) < cut then
                        ran_out[id] = one
                        remember(id, ''); del('r:' .. id)
                    end
                end
                lapse(latest(ran_out))
                top.fence = s(token)
                top.exp = s(math.max(tonumber(top.exp), e))
            end
            set('p', cjson.encode(top))
            set('r:' .. p.lease, cjson.encode({e = s(e), r = sent, a = s(now), f = s(token),
                                              d = s(p.lease_ms), who = p.who}))
            redis.call('HSET', KEYS[2], 'token', s(token), 'granted', s(now))
        end

    -- renew_share: extend a share, as renew does a lease (lease, lease_ms, sent, order,
    --   keeper). Applied when the share is in a group not ended and not run out; the group
    --   ends no earlier than the share.
    elseif op == 'renew_share' then
        local top = lease('p')
        local kept = h['r:' .. p.lease]
        local one = kept and cjson.decode(kept)
        ok = h.shared ~= nil and top ~= nil and top.ended == '' and one and tonumber(one.e) > now
        local from = now
        if ok and tonumber(one.e) - tonumber(one.d) > now then from = tonumber(one.e) - tonumber(one.d) end
        if ok and from + p.lease_ms < tonumber(one.e) then
            ok = p.sent ~= nil and tonumber(p.sent) >= tonumber(one.r) + tonumber(p.order or 0)
        end
        if ok then
            one.e, one.d = s(from + p.lease_ms), s(p.lease_ms)
            if p.sent ~= nil then one.r = s(math.max(tonumber(p.sent), tonumber(one.r))) end
            if p.keeper ~= cjson.null and p.keeper ~= nil then one.k = p.keeper end
            set('r:' .. p.lease, cjson.encode(one))
            top.exp = s(math.max(tonumber(top.exp), from + p.lease_ms))
            set('p', cjson.encode(top))
        end

    -- end_share: release or force-release a share (lease, ended, forced_by, forced_reason,
    --   audit, as end). Applied when the share is in a group not ended: it leaves the group
    --   (handed on), and a group left with no share that has not run out ends as it did (else
    --   its end comes down to the latest of the shares left). An id never seen here is barred,
    --   as end bars a lease's. The group's lapse, if it has none yet: a share forced, else,
    --   where the group ends, the latest of the shares left (they ran out). A group that ends
    --   is the fence's "last" as a lease's end is, or its lapse, if it has one.
    elseif op == 'end_share' then
        local top = lease('p')
        local all = shares()
        ok = h.shared ~= nil and top ~= nil and top.ended == '' and all[p.lease] ~= nil
        wake = true
        if ok then
            remember(p.lease, p.ended)
            del('r:' .. p.lease)
            if p.forced_by ~= nil then lapse(p.lease, all[p.lease], true) end
            all[p.lease] = nil
            local left, last = false, 0
            for _, one in pairs(all) do
                left = left or tonumber(one.e) >= cut
                last = math.max(last, tonumber(one.e))
            end
            if left then
                top.exp = s(last)
                set('p', cjson.encode(top))
                write_audit()
            else
                lapse(latest(all))
                for id, _ in pairs(all) do remember(id, ''); del('r:' .. id) end
                finish(top, 'p')
                if h.lapse ~= nil then redis.call('HSET', KEYS[2], 'last', h.lapse) end
            end
        else
            bar = bar_if_unseen(top)
        end

    -- claim: a waiting exclusive acquire keeps new shares out ("for": how long, ms; "until": never
    --   past this time, as the caller reckons the step's clock: a claim that lands late ends with
    --   the wait it was made for). Applied when the lock is held by a group not ended, and the
    --   claim only grows.
    elseif op == 'claim' then
        local top = lease('p')
        local claim = now + tonumber(p['for'])
        if p['until'] ~= nil and p['until'] ~= cjson.null then
            claim = math.min(claim, tonumber(p['until']))
        end
        ok = h.shared ~= nil and h.slots == nil and top ~= nil and top.ended == ''
            and tonumber(h.claim or 0) < claim and claim > now
        if ok then set('claim', s(claim)) end

    -- join: take a place in the lock's line of fair waiters.
    --   ticket, who (JSON text), since (when the caller began waiting; absent: now).
    --   Applied when the lock's hash exists and the ticket has no place yet.
    elseif op == 'join' then
        ok = has and h['w:' .. p.ticket] == nil
        if ok then
            local number = tonumber(h.next or 0)
            local since = now
            if p.since ~= nil then since = tonumber(p.since) end
            set('w:' .. p.ticket, cjson.encode({n = s(number), who = p.who, since = s(since),
                                                seen = s(now)}))
            set('next', s(number + 1))
            polled(now)
        end

    -- beat: a waiter says it still waits, and removes lapsed places ahead of it.
    --   ticket, drop ([[ticket, seen_ms], ...]).
    --   Applied when the place exists, its last beat is older than now, and each place to drop
    --   is as the caller saw it.
    elseif op == 'beat' then
        local place = h['w:' .. p.ticket]
        ok = place ~= nil and tonumber(cjson.decode(place).seen) < now and unchanged(p.drop)
        if ok then
            local w = cjson.decode(place)
            w.seen = s(now)
            set('w:' .. p.ticket, cjson.encode(w))
            for _, d in ipairs(p.drop or {}) do del('w:' .. d[1]) end
            polled(now)
            wake = #(p.drop or {}) > 0
        end

    -- leave: give up a place in line.
    --   ticket. Applied when the place exists.
    elseif op == 'leave' then
        local place = h['w:' .. p.ticket]
        ok = place ~= nil
        if ok then
            -- The head leaving lets the next in line (or, the line empty, anyone) go.
            local n = tonumber(cjson.decode(place).n)
            wake = true
            for f, v in pairs(h) do
                if string.sub(f, 1, 2) == 'w:' and tonumber(cjson.decode(v).n) < n then wake = false end
            end
            del('w:' .. p.ticket)
        end

    -- resize: make the lock a pool of "new" slots, or change a pool's size.
    --   old (the size the caller saw; null: a plain lock), new.
    --   Applied when the size is still "old", a plain lock's lease is free, and no slot that
    --   would be cut off is held.
    elseif op == 'resize' then
        local old = p.old
        if old == cjson.null then old = nil end
        local size = h.slots and tonumber(h.slots)
        ok = size == (old and tonumber(old)) and (size ~= nil or free(lease('p')))
        for n = tonumber(p.new), (size or 0) - 1 do
            ok = ok and free(lease('s:' .. s(n)))
        end
        if ok then set('slots', s(p.new)) end
        wake = tonumber(p.new) > (size or 0)

    -- read: no branch of its own: nothing is written, the answer is all (lease, slot: the answer
    --   says how that lease ended, if it was taken over). Any other step is an error.
    elseif op ~= 'read' then
        return redis.error_reply('ERR awsflock: unknown step ' .. op)
    end

    if ok and op ~= 'read' then collect() end
    -- Only a hint, after every write: pcall, so that a user not allowed to publish (ACL rules from
    -- before the hint) or any failure of it leaves the step as it was; waiters then only poll.
    if ok and wake then redis.pcall('PUBLISH', string.sub(KEYS[1], 1, -5) .. 'wake', op) end
    if p.touch and op ~= 'read' then
        -- Something to wait for: WAIT and WAITAOF count this connection's writes, and what a
        -- refusal showed may have been written by another connection not yet on the replicas.
        redis.call('HSET', KEYS[2], 'touched', s(now))
    end
    local out = {}
    for k, v in pairs(h) do out[#out + 1] = k; out[#out + 1] = v end
    if ok then return {1, s(now), out} end
    if bar then return {2, s(now), out} end
    local ended = false
    if p.lease and (op == 'end' or op == 'renew' or op == 'read' or op == 'renew_share'
                    or op == 'end_share') then
        ended = done(p.lease) or false
    end
    return {0, s(now), out, ended}
end

-- A set's step (awsflock/sets.py): take_all, renew_all or end_all of 1 to 32 plain locks, KEYS
-- holding each lock's five keys in turn, p.steps each lock's parameters (never a state). Every
-- lock's keys are checked (usable) before the first write. take_all is all or nothing: a first
-- pass checks every take (dry), and only if each would be applied are they made; refused, the
-- refused take's answer and a read of each other lock. Answer: {1 or 0, now, {each lock's answer}}.
local function all(op, p)
    local steps = p.steps
    local bad = type(steps) ~= 'table' or #steps < 1 or #steps > 32 or #KEYS ~= 5 * #steps
    local keys, seen = {}, {}
    for i = 1, bad and 0 or #steps do
        keys[i] = {KEYS[5 * i - 4], KEYS[5 * i - 3], KEYS[5 * i - 2], KEYS[5 * i - 1], KEYS[5 * i]}
        local one = steps[i]
        bad = bad or seen[keys[i][1]] or (one.slot ~= nil and one.slot ~= cjson.null)
            or (one.ticket ~= nil and one.ticket ~= cjson.null) or one.state ~= nil
        seen[keys[i][1]] = true
    end
    if bad then return redis.error_reply('ERR awsflock: bad arguments for step ' .. op) end
    local clock = clock_of(steps[1])  -- every lock's step carries the same clock
    local single = string.sub(op, 1, -5)
    for i = 1, #steps do
        local refused = usable(keys[i], single)
        if refused then return refused end
    end
    if p.touch then redis.call('HSET', keys[1][2], 'touched', s(clock.now)) end
    local replies = {}
    for i = 1, op == 'take_all' and #steps or 0 do
        local r = step(keys[i], 'take', steps[i], clock, true)
        if r ~= true then
            if r.err then return r end
            for j = 1, #steps do
                replies[j] = (j == i) and r or step(keys[j], 'read', {}, clock, false)
            end
            return {0, s(clock.now), replies}
        end
    end
    for i = 1, #steps do
        local r = step(keys[i], single, steps[i], clock, false)
        if r.err then return r end
        replies[i] = r
    end
    return {1, s(clock.now), replies}
end

-- state: a read of the lock's state, in KEYS[2] only (one read; now, skew as every step's).
--   Answer: {1, now, {}, false, {STATE, LEASE, MS}}, each nil where no state was written.
local function state(p)
    local found = redis.call('HMGET', KEYS[2], 'state', 'state_lease', 'state_ms')
    return {1, s(clock_of(p).now), {}, false, found}
end

local op = ARGV[1]
local p = cjson.decode(ARGV[2])
if op == 'take_all' or op == 'renew_all' or op == 'end_all' then return all(op, p) end
if op == 'state' then return state(p) end
return step(KEYS, op, p, clock_of(p), false)
