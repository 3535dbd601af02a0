-- finish with the workflow's ending, as one script: like settled_template.lua, but its first
-- part (end_release.lua) writes the ending and releases only under the pass's token, and the
-- standing and the done follow only if it did (a cancelled pass leaves both to the cancel).
--
-- KEYS: the workflow's three, settle.lua's eight, then the scheduler's. ARGV[1] = how many
-- ARGV the first part takes (n), ARGV[2] = how many settle takes (m); then the first part's
-- n, settle's m, and the rest the done's. Returns {1 ours | 0 refused, settle's reply}.
-- include: three_parts

local ours = first(first_args)
if ours ~= 1 then return {0, 0} end
local stood = stand(stand_keys, stand_args)
after(then_keys, then_args)
return {1, stood}
