-- Table and string churn in Lua 5.4.
--
-- Usage: lua5.4 churn.lua N
--
-- N steps over a working set that grows and shrinks in waves. Each step builds
-- a few strings (string.format, concatenation with .., table.concat of a
-- small buffer, string.rep, gsub), inserts an entry keyed by a fresh string
-- into a hash table or removes a random live one, appends to or removes from
-- the array part of a queue table (table.insert / table.remove at the end and,
-- rarely, in the middle), and makes or calls a closure that captures upvalues
-- (a counter per entry, kept in the entry). Every 2000 steps a temporary table
-- is built from part of the working set, sorted with a comparison closure and
-- dropped, and collectgarbage("step") runs an incremental step on top of the
-- automatic collector.
--
-- Output: counts, the final sizes and a 64-bit FNV-1a digest of every string
-- built and every value read back. All choices come from an inline xorshift
-- PRNG seeded from N, so the output depends on N only (no table iteration order
-- is ever observed: keys are visited through sorted arrays). Exits with status
-- 1 when a cross-check fails.

local n = tonumber(arg[1]) or 20000

local state = 0x9E3779B97F4A7C15 ~ n
local function rand()
  -- xorshift64*: Lua 5.4 integers wrap at 64 bits.
  state = state ~ (state >> 12)
  state = state ~ (state << 25)
  state = state ~ (state >> 27)
  return ((state * 0x2545F4914F6CDD1D) >> 11) & 0x7FFFFFFF
end

local FNV_PRIME = 0x100000001B3
local digest = 0xCBF29CE484222325
local function mix_string(s)
  -- The length and four sampled bytes: a byte loop over every string would make
  -- the digest, not the churn, the bulk of the run. Full strings go in at the end.
  local len = #s
  local a, b = s:byte(1), s:byte(len)
  local c, d = s:byte((len + 1) // 2), s:byte((len + 3) // 4)
  digest = (((((digest ~ len) * FNV_PRIME ~ a) * FNV_PRIME ~ b) * FNV_PRIME ~ c) * FNV_PRIME ~ d) * FNV_PRIME
end
local function mix_full(s)
  local h = digest
  for i = 1, #s do
    h = (h ~ s:byte(i)) * FNV_PRIME
  end
  digest = (h ~ #s) * FNV_PRIME
end
local function mix_int(v)
  digest = (digest ~ v) * FNV_PRIME
end

local function fail(msg)
  io.stderr:write("churn.lua: ", msg, "\n")
  os.exit(1)
end

local live = {}      -- key -> entry {slot=, id=, text=, bump=closure}
local keys = {}      -- the live keys, array part, swap-remove on delete
local queue = {}
local inserts, deletes, calls, sorts, queued = 0, 0, 0, 0, 0
local peak = 0
local period = 8000 -- one grow-and-shrink wave; fixed, so the cost of a step does not depend on N
local buf = {}

for step = 1, n do
  local growing = ((step - 1) // (period // 2)) % 2 == 0
  local r = rand()
  local nkeys = #keys
  if nkeys == 0 or (r % 1024) < (growing and 880 or 260) then
    local id = rand()
    local key = "k" .. id .. ":" .. step
    local count = 0
    local entry = {
      slot = nkeys + 1,
      id = id,
      text = string.format("%08x|%s|", id, key) .. string.rep("ab", 1 + id % 12),
    }
    entry.bump = function(by)
      count = count + by
      return count + entry.id % 7
    end
    if live[key] then fail("duplicate key " .. key) end
    live[key] = entry
    keys[nkeys + 1] = key
    inserts = inserts + 1
    mix_string(entry.text)
  else
    local i = r % nkeys + 1
    local key = keys[i]
    local entry = live[key]
    if entry == nil or entry.slot ~= i then fail("slot mismatch for " .. tostring(key)) end
    live[key] = nil
    local last = keys[nkeys]
    keys[nkeys] = nil
    if i ~= nkeys then
      keys[i] = last
      live[last].slot = i
    end
    deletes = deletes + 1
    mix_int(entry.bump(3))
  end
  -- Read back one live entry and call its closure.
  nkeys = #keys
  if nkeys > 0 then
    local key = keys[rand() % nkeys + 1]
    local entry = live[key]
    local v = entry.bump(1)
    calls = calls + 1
    mix_int(v)
    if entry.text:sub(10, 9 + #key) ~= key then fail("entry text does not hold its key " .. key) end
  end
  -- A small string buffer, joined, rewritten with gsub, dropped.
  for j = 1, 1 + r % 6 do buf[j] = tostring(r + j) end
  local joined = table.concat(buf, ",", 1, 1 + r % 6)
  local rewritten = joined:gsub(",(%d)", "<%1>")
  mix_string(rewritten)
  for j = #buf, 1, -1 do buf[j] = nil end
  -- The queue: grow in growing phases, shrink otherwise, a middle removal now and then.
  if growing or #queue == 0 then
    table.insert(queue, { step, r })
    queued = queued + 1
    if #queue > 3000 then
      for _ = 1, 1500 do table.remove(queue) end
    end
  else
    local item = table.remove(queue)
    mix_int(item[1])
  end
  if r % 97 == 0 and #queue > 2 then
    local item = table.remove(queue, #queue // 2)
    mix_int(item[2])
  end
  -- Every 2000 steps: a temporary table from a window of the working set, sorted.
  if step % 2000 == 0 and nkeys > 0 then
    local start = rand() % nkeys + 1
    local tmp = {}
    for j = start, math.min(nkeys, start + 600) do
      local e = live[keys[j]]
      tmp[#tmp + 1] = { id = e.id, key = keys[j] }
    end
    table.sort(tmp, function(a, b)
      if a.id ~= b.id then return a.id < b.id end
      return a.key < b.key
    end)
    for j = 1, #tmp, 20 do mix_string(tmp[j].key) end
    sorts = sorts + 1
    collectgarbage("step")
  end
  if nkeys > peak then peak = nkeys end
end

-- Final check: every live key is in the array at its slot; then a digest of the
-- working set in sorted key order.
local sorted = {}
for i = 1, #keys do
  local e = live[keys[i]]
  if e == nil or e.slot ~= i then fail("final slot mismatch at " .. i) end
  sorted[i] = keys[i]
end
if inserts - deletes ~= #keys then fail("inserts - deletes ~= live count") end
table.sort(sorted)
for i = 1, #sorted do mix_full(sorted[i]) mix_full(live[sorted[i]].text) end

print(string.format("steps %d inserts %d deletes %d calls %d sorts %d queued %d", n, inserts, deletes, calls, sorts, queued))
print(string.format("live %d peak %d queue %d", #keys, peak, #queue))
print(string.format("digest %016x", digest))
