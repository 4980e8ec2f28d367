-- awsflock's Redis audit records: a put and a void, each one atomic call, so that the record
-- a force-release wrote before its force can never come back after it was voided, whatever
-- order the two land in. Loaded by awsflock/stores/redis/store.py (AUDIT).
--   KEYS[1]: the audit record's key (P:audit:KEY), a string of JSON.
--   ARGV[1]: 'put' or 'void'; ARGV[2], ARGV[3]: the statuses applied and void
--   (protocol.AUDIT_APPLIED, AUDIT_VOID); ARGV[4]: put: the record's JSON, void: an action
--   id, or '' for any.
-- put: writes the record unless the one there took effect (status applied), or is void and
-- the new one did not take effect. void: marks the record there void if it has no status of
-- those two and is the action's (any, with ''); where there is none, leaves a void one.
-- Answer: 1 if it wrote, 0 if it left the record as it was.
local text = redis.call('GET', KEYS[1])
local there = text and cjson.decode(text) or nil
local status = there and there.status or nil
if ARGV[1] == 'put' then
    if status == ARGV[2] then return 0 end
    if status == ARGV[3] and cjson.decode(ARGV[4]).status ~= ARGV[2] then return 0 end
    redis.call('SET', KEYS[1], ARGV[4])
    return 1
end
if not there then
    local left = {status = ARGV[3]}
    if ARGV[4] ~= '' then left.action_id = ARGV[4] end
    redis.call('SET', KEYS[1], cjson.encode(left))
    return 1
end
if status == ARGV[2] or status == ARGV[3] then return 0 end
if ARGV[4] ~= '' and there.action_id ~= ARGV[4] then return 0 end
there.status = ARGV[3]
redis.call('SET', KEYS[1], cjson.encode(there))
return 1
