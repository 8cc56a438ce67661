-- Compare-and-pexpire, restoring a lost key: reset the TTL when the key still
-- carries our token; set it again when it is missing (a node that restarted
-- without its data), NX so that it can never replace another owner's key.
-- KEYS[1] = lock key, ARGV[1] = token, ARGV[2] = new TTL in milliseconds.
-- Returns 1 when extended, 2 when restored, 0 when another token holds it.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	redis.call("PEXPIRE", KEYS[1], ARGV[2])
	return 1
end
if v == false and redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2], "NX") then
	return 2
end
return 0
