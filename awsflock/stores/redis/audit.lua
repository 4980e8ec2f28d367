-- awsflock's Redis audit record put: one atomic call, so that a record whose action took effect
-- is never replaced, whatever order puts land in. A force-release's step writes its record
-- itself (steps.lua, KEYS[6]); this put is a force-release run's when it finds the record of a
-- force that took effect missing (written from the lock's hash). Loaded by
-- awsflock/stores/redis/store.py (AUDIT).
--   KEYS[1]: the audit record's key (P:{NAME}:audit:KEY), a string of JSON.
--   ARGV[1], ARGV[2]: the statuses applied and void (protocol.AUDIT_APPLIED, AUDIT_VOID);
--   ARGV[3]: the record's JSON.
-- Writes the record unless the one there took effect (status applied), or is void (written by
-- a development build) and the new one did not take effect.
-- Answer: 1 if it wrote, 0 if it left the record as it was.
local text = redis.call('GET', KEYS[1])
local there = text and cjson.decode(text) or nil
local status = there and there.status or nil
if status == ARGV[1] then return 0 end
if status == ARGV[2] and cjson.decode(ARGV[3]).status ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[3])
return 1
