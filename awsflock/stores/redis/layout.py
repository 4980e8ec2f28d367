"""The Redis store's layout: which keys a lock has, and the one script that is every lock step.

A lock ``NAME`` under the prefix ``P`` (``?prefix=``, else the table name) has three keys, all in
one hash slot (the name, encoded so that it holds no ``}``, is their hash tag):

- ``P:{NAME}:lock``, a hash: the plain lease (field ``p``), a pool's size (``slots``) and its
  slots' leases (``s:N``), the line of fair waiters (``w:TICKET``, ``next``, ``polled``). Each
  lease is a JSON object whose numbers are strings (Lua's numbers are doubles: written with
  ``%.0f``, read with ``tonumber``, exact below 2^53). Garbage: once no lease in it can be
  live and nobody waits, ``PEXPIREAT`` removes it ``RETAIN_MS`` later. A pool's hash is kept.
- ``P:{NAME}:fence``, a hash: the highest fencing token ever granted on the name, any slot
  (``token``) and the time of the last grant (``granted``). Never expired, never deleted: tokens
  go up for as long as the data survives, whatever happens to the lock's hash.
- ``P:{NAME}:bars``, a sorted set: lease ids an end step found holding nothing here, by when
  (their take may still land late: an acquire gave up without its answer); a take under one
  is refused. Each is kept ``RETAIN_MS``, however many there are; the set expires
  ``RETAIN_MS`` after its latest.
- ``P:{NAME}:done``, a sorted set: every lease id taken over here (its lease ended: released,
  forced, or run out), scored ``when * 4 + how`` (1 released, 2 forced, 3 ran out), kept
  ``DONE_MS`` however many hand-offs there were: a release retried after its first try went
  through unanswered still finds it released, and a take that lands late under an id already
  used is refused. The lease record's ``hist`` keeps only the last few, with their details.
- ``P:{NAME}:forced``, a hash: of those, the force-released ones, by lease id, with the
  force-release's action id (``forced:ACTION``), so a force-release retried after its first try
  went through unanswered still knows it was its own; it expires ``DONE_MS`` after the last.

Waiters listen on the channel ``P:{NAME}:wake``, where the script publishes (after its writes,
as a hint only) when a step may let a waiter take the lock: a lease ended (release,
force-release, a pool slot among them), the head of the line left it or its lapsed places were
removed, a pool's head took its slot, a pool grew.

Audit records are strings of JSON at ``P:audit:KEY``; ``P:layout`` holds ``LAYOUT`` once
``table-create`` ran. No key of a lock is written outside ``SCRIPT``.
"""

from __future__ import annotations

import hashlib
import re

from awsflock.protocol import DONE_MS, LINE_LAPSE_MS

#: The layout's version, kept at ``P:layout``; table-create refuses any other value there.
LAYOUT = "awsflock redis layout 1"
#: A prefix: no hash-tag braces (a lock's tag must be its own), no glob characters (SCAN).
PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
#: How long a plain lock's hash is kept after its last lease could have ended: a retried
#: release still finds what it did, and ``status`` shows who held the lock lately.
RETAIN_MS = 24 * 3600 * 1000
#: A lease's record remembers the leases before it (``hist``: id, how it ended, when it was
#: taken over): the last three, and any taken over within ``HISTORY_MS``, at most
#: ``HISTORY_KEEP``. Hand-offs on Redis take milliseconds: three can pass while a release's
#: first try, applied, goes unanswered and its retry waits; the retry must still find it.
HISTORY_MS = 60_000
HISTORY_KEEP = 32
#: A lock remembers the lease ids it took over (``P:{NAME}:done``) for ``DONE_MS``: longer than
#: any retry of a step waits, and than a request held back on the wire is expected to land late.


def encode(lock_id: str) -> str:
    """``lock_id`` without ``{`` or ``}`` (so it can be a hash tag) and without ``%``."""
    return lock_id.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def decode(text: str) -> str:
    return text.replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


def lock_key(prefix: str, lock_id: str) -> str:
    return f"{prefix}:{{{encode(lock_id)}}}:lock"


def fence_key(prefix: str, lock_id: str) -> str:
    return f"{prefix}:{{{encode(lock_id)}}}:fence"


def bars_key(prefix: str, lock_id: str) -> str:
    return f"{prefix}:{{{encode(lock_id)}}}:bars"


def done_key(prefix: str, lock_id: str) -> str:
    return f"{prefix}:{{{encode(lock_id)}}}:done"


def forced_key(prefix: str, lock_id: str) -> str:
    return f"{prefix}:{{{encode(lock_id)}}}:forced"


def wake_channel(prefix: str, lock_id: str) -> str:
    """The channel the script publishes on when a step may let a waiter take the lock."""
    return f"{prefix}:{{{encode(lock_id)}}}:wake"


def lock_of(prefix: str, key: str) -> str | None:
    """The lock name of a lock hash's key, None if ``key`` is not one."""
    head, tail = f"{prefix}:{{", "}:lock"
    if not (key.startswith(head) and key.endswith(tail)) or len(key) < len(head + tail):
        return None
    inner = key[len(head) : -len(tail)]
    return None if "}" in inner else decode(inner)


def audit_key(prefix: str, key: str) -> str:
    return f"{prefix}:audit:{key}"


def layout_key(prefix: str) -> str:
    return f"{prefix}:layout"


# KEYS[1]: the lock's hash, KEYS[2]: its fence, KEYS[3]: its barred lease ids, KEYS[4]: the
# lease ids it took over, KEYS[5]: the force-released ones among them. ARGV[1]: the
# step; ARGV[2]: its parameters (JSON): "now", "skew" (the caller's clock; absent: the
# server's TIME, no skew), "sent" (the caller's clock when it sent a take or renew, which orders
# renews of one lease), "order" (how far apart two readings must be to order them), "lease",
# "who" (JSON text), "lease_ms", "slot", "slots", "ticket", "drop" ([[ticket, seen_ms], ...]),
# "keeper", "ended", "forced_by", "forced_reason", "since", "old", "new", "touch".
#
# Every check is made before the first write, so a refusal (or an error: a key of another
# type) changes nothing, but for one: an end step whose lease id the lock never saw bars the id
# (answer 2). Answer: {1|0|2, now, the hash's fields after the step, how the step's lease id
# ended if it was taken over (a refused renew or end: "released", "forced:", "") else false} or,
# when the server's clock reads earlier than the lock's last grant, {-1, now, that grant's time}.
SCRIPT = r"""
local op = ARGV[1]
local p = cjson.decode(ARGV[2])
local LAPSE = {LAPSE}
local RETAIN = {RETAIN}
local HISTORY = {HISTORY}
local KEEP = {KEEP}
local DONE = {DONE}
local function s(n) return string.format('%.0f', n) end

local server = p.now == nil
local now, skew
if server then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    skew = 0
else
    now = tonumber(p.now)
    skew = tonumber(p.skew or 0)
end
local cut = now - skew

local flat = redis.call('HGETALL', KEYS[1])
local h = {}
for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
local has = #flat > 0
local fence = redis.call('HMGET', KEYS[2], 'token', 'granted')

local function lease(field)
    local text = h[field]
    if text == nil then return nil end
    return cjson.decode(text)
end
local function free(l)
    return l == nil or l.ended ~= '' or tonumber(l.exp) < cut
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
            last = math.max(last, tonumber(cjson.decode(value).exp))
        end
    end
    if h.polled ~= nil then last = math.max(last, tonumber(h.polled) + LAPSE) end
    redis.call('PEXPIREAT', KEYS[1], s(math.max(last, now) + RETAIN))
end

-- A user whose ACL allows some of the writes but not others would fail half-way: refuse first.
if op ~= 'read' and redis.acl_check_cmd then
    for _, check in ipairs({{'HSET', KEYS[1], 'f', 'v'}, {'HDEL', KEYS[1], 'f'},
                            {'PEXPIREAT', KEYS[1], '1'}, {'PERSIST', KEYS[1]},
                            {'HSET', KEYS[2], 'f', 'v'}, {'ZADD', KEYS[3], '1', 'x'},
                            {'ZREMRANGEBYSCORE', KEYS[3], '0', '1'},
                            {'PEXPIREAT', KEYS[3], '1'}, {'ZADD', KEYS[4], '1', 'x'},
                            {'ZREMRANGEBYSCORE', KEYS[4], '0', '1'},
                            {'PEXPIREAT', KEYS[4], '1'}, {'HSET', KEYS[5], 'f', 'v'},
                            {'PEXPIREAT', KEYS[5], '1'}}) do
        if not redis.acl_check_cmd(unpack(check)) then
            return redis.error_reply('NOPERM awsflock: this user may not run ' .. check[1]
                                     .. ' on ' .. check[2])
        end
    end
end

-- A key of another type under a lock's names would fail a write half-way: refuse first.
if op ~= 'read' then
    local kinds = {'hash', 'hash', 'zset', 'zset', 'hash'}
    for i, kind in ipairs(kinds) do
        local found = redis.call('TYPE', KEYS[i]).ok
        if found ~= 'none' and found ~= kind then
            return redis.error_reply('WRONGTYPE awsflock: ' .. KEYS[i] .. ' holds a ' .. found)
        end
    end
end

local slot = p.slot
local field = 'p'
if slot ~= cjson.null and slot ~= nil then field = 's:' .. s(slot) else slot = nil end
local ok = false
-- An end step that barred its lease id (it held nothing here): written, though not applied.
local bar = false
-- Whether the step, applied, may let a waiter in: then the waiters are told (below).
local wake = false

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
        ok = ok and h['w:' .. ticket] ~= nil and unchanged(p.drop)
    end
    if ok and server and fence[2] and now < tonumber(fence[2]) then
        return {-1, s(now), fence[2]}
    end
    if ok then
        local token = math.max(now * 1000, tonumber(fence[1] or 0)) + 1
        local hist = {}
        if r ~= nil and r.lease ~= '' then
            local how = 3
            if r.ended == 'released' then how = 1
            elseif string.sub(r.ended, 1, 7) == 'forced:' then how = 2 end
            redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. s((now - DONE) * 4))
            redis.call('ZADD', KEYS[4], s(now * 4 + how), r.lease)
            if server then redis.call('PEXPIREAT', KEYS[4], s(now + DONE)) end
            if how == 2 then
                redis.call('HSET', KEYS[5], r.lease, r.ended)
                if server then redis.call('PEXPIREAT', KEYS[5], s(now + DONE)) end
            end
            -- The lease taken over, then the ones before it: the last three, and any older
            -- that ended within HISTORY (at most KEEP), so a release retried after many quick
            -- hand-offs still finds what its first try did.
            hist[1] = {r.lease, r.ended, s(now)}
            for _, old in ipairs(r.hist or {}) do
                if #hist >= KEEP then break end
                local at = tonumber(old[3] or 0)
                if #hist >= 3 and at < now - HISTORY then break end
                hist[#hist + 1] = old
            end
        end
        local new = {lease = p.lease, who = p.who, ms = s(p.lease_ms), exp = s(now + p.lease_ms),
                     acq = s(now), fence = s(token), ended = '', keeper = ''}
        if p.sent ~= nil then new.rs = s(p.sent) end
        if #hist > 0 then new.hist = hist end
        set(field, cjson.encode(new))
        if slot ~= nil then set('slots', s(p.slots)) end
        if ticket ~= cjson.null and ticket ~= nil then
            del('w:' .. ticket)
            for _, d in ipairs(p.drop or {}) do del('w:' .. d[1]) end
            wake = slot ~= nil  -- the next in line may take another free slot
        end
        redis.call('HSET', KEYS[2], 'token', s(token), 'granted', s(now))
    end

elseif op == 'renew' then
    local l = lease(field)
    local in_pool = (slot == nil and h.slots == nil)
        or (slot ~= nil and h.slots ~= nil and tonumber(h.slots) > slot)
    ok = l ~= nil and l.lease == p.lease and l.ended == '' and tonumber(l.exp) > now and in_pool
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
    if ok and from + p.lease_ms < tonumber(l.exp) then
        ok = p.sent ~= nil and l.rs ~= nil
            and tonumber(p.sent) >= tonumber(l.rs) + tonumber(p.order or 0)
    end
    if ok then
        l.exp = s(from + p.lease_ms)
        l.ms = s(p.lease_ms)
        if p.sent ~= nil then l.rs = s(math.max(tonumber(p.sent), tonumber(l.rs or 0))) end
        if p.keeper ~= cjson.null and p.keeper ~= nil then l.keeper = p.keeper end
        set(field, cjson.encode(l))
    end

elseif op == 'end' then
    local l = lease(field)
    ok = l ~= nil and l.lease == p.lease and l.ended == '' and (slot ~= nil or h.slots == nil)
    wake = true
    if ok then
        l.ended = p.ended
        l.exp = s(now)
        if p.forced_by ~= nil then
            l.fby, l.fwhy, l.fms = p.forced_by, p.forced_reason, s(now)
        end
        set(field, cjson.encode(l))
    elseif not granted(l, p.lease) and not barred(p.lease) then
        -- Nothing here was ever granted under this id, but a take of it may still be on its
        -- way (an acquire that gave up with its answer lost): bar the id, so that take is
        -- refused whenever it lands (within RETAIN), and the lock is never held by nobody.
        bar = true
        redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. s(now - RETAIN))
        redis.call('ZADD', KEYS[3], s(now), p.lease)
        if server then redis.call('PEXPIREAT', KEYS[3], s(now + RETAIN)) end
    end

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
if (op == 'end' or op == 'renew' or op == 'read') and p.lease then
    ended = done(p.lease) or false
end
return {0, s(now), out, ended}
"""


def script() -> str:
    return (
        SCRIPT.replace("{LAPSE}", str(int(LINE_LAPSE_MS)))
        .replace("{RETAIN}", str(int(RETAIN_MS)))
        .replace("{HISTORY}", str(int(HISTORY_MS)))
        .replace("{KEEP}", str(int(HISTORY_KEEP)))
        .replace("{DONE}", str(int(DONE_MS)))
    )


def sha(text: str) -> str:
    """The SHA-1 that EVALSHA names a script by."""
    return hashlib.sha1(text.encode()).hexdigest()
