-- The wakeups on the stream not yet handed to the group, and how old the oldest is (its id is
-- the server's time of the XADD). KEYS[1] = {ns}:ready   ARGV[1] = the group.
-- Returns {count, age in ms or false}. The group's lag is the count where the server knows it;
-- after a deletion inside the undelivered range it may not, and the entries are counted then
-- (at most ARGV[2] of them: a count past that is reported as that many).
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, false} end
local last, lag = nil, nil
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local fields = {}
  for i = 1, #group, 2 do fields[group[i]] = group[i + 1] end
  if fields['name'] == ARGV[1] then
    last, lag = fields['last-delivered-id'], fields['lag']
  end
end
if last == nil then return {0, false} end
local first = redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', 1)
if #first == 0 then return {0, false} end
if type(lag) ~= 'number' then
  lag = #redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', tonumber(ARGV[2]))
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local made = tonumber(string.match(first[1][1], '^(%d+)'))
return {lag, math.max(now - made, 0)}
