-- A wall-clock jump of ARGV[1] milliseconds on this node, as Redis would see
-- it: Redis stores expiry as an absolute Unix time, so moving the clock
-- forward by D shortens every key's remaining TTL by D and expires the keys
-- with D or less left; a backward jump (negative D) lengthens them. Keys
-- without an expiry are untouched. Runs atomically over the whole keyspace
-- of the selected database. Returns {adjusted, deleted}.
local by = tonumber(ARGV[1])
local adjusted, deleted = 0, 0
local cursor = "0"
repeat
  local page = redis.call("SCAN", cursor, "COUNT", 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    local left = redis.call("PTTL", key)
    if left >= 0 then
      if left <= by then
        redis.call("DEL", key)
        deleted = deleted + 1
      else
        redis.call("PEXPIRE", key, left - by)
        adjusted = adjusted + 1
      end
    end
  end
until cursor == "0"
return {adjusted, deleted}
