-- awsflock's Redis audit void: sets an audit record's status to void if it exists (and was
-- written by the action ARGV[2], if given). Loaded by awsflock/stores/redis/store.py (VOID).
--   KEYS[1]: the audit record's key (P:audit:KEY), a string of JSON.
--   ARGV[1]: the status to write (protocol.AUDIT_VOID); ARGV[2]: an action id, or ''.
-- Answer: 1 if the record was voided, 0 if there is none or it is another action's.
local text = redis.call('GET', KEYS[1])
if not text then return 0 end
local entry = cjson.decode(text)
if ARGV[2] ~= '' and entry.action_id ~= ARGV[2] then return 0 end
entry.status = ARGV[1]
redis.call('SET', KEYS[1], cjson.encode(entry))
return 1
