-- Returns the checkpoint as `dump` (prelude.lua) encodes it.
return dump()
