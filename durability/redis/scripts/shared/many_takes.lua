-- many_takes.lua: a piece `take_many_template.lua` and `read_many_template.lua` include, not a
-- script of its own. It declares the queue's take part as `take(KEYS, ARGV)` (the templates'
-- placeholder inside it is filled after this is included) and `up_to`, the loop both run.
local function take(KEYS, ARGV)
--[[TAKE]]
end

-- The take part with `args`, up to `k` times, each workflow it took handed to `each`; returns
-- what `each` made of them, in order, or the take part's own reply when the first take found
-- nothing (false, or a table whose first item is false).
local function up_to(k, args, each)
  local out = {}
  for _ = 1, k do
    local taken = take(KEYS, args)
    if not taken or not taken[1] then
      if #out == 0 then
        return taken
      end
      break
    end
    out[#out + 1] = each(taken)
  end
  return out
end
