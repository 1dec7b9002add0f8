"""The registry's Lua scripts: each declares every key it touches in KEYS, all with one hash tag.

Offsets travel as decimal strings and are compared as 20-digit zero-padded strings (members) or
with ``tonumber`` (exact: offsets are at most 2**53 - 1); a number is turned back into a string
only with ``string.format('%.0f', n)`` (``tostring`` writes large ones in exponent notation).

A segment is keyed by its *first offset* (``SegmentEntry.first_offset``: the base offset, or a
later one for a new leader's straddling segment): the ZSET member is ``{first}:{last}``, its score
``first``, its hash ``segment:{first}``. Lookups, overlap checks and deletions all work on
[first, last], so a segment whose object begins with batches another segment holds never overlaps it.
"""

from __future__ import annotations

# -- Lua scripts (every key in KEYS, all with one hash tag) ---------------------------------------

_LUA_NUM = """
local function num(s)
  local t = string.gsub(s, '^0+', '')
  if t == '' then return '0' end
  return t
end
"""

# raise(key, field, value): HSET the field to value unless it already holds a number >= value
# (the coverage hash's monotonic marks: next_offset, expired_until)
_LUA_RAISE = """
local function raise(key, field, value)
  local cur = redis.call('HGET', key, field)
  if (not cur) or tonumber(cur) < tonumber(value) then redis.call('HSET', key, field, value) end
end
"""

_LUA_REFRESH = """
local function refresh(zkey, ikey, now)
  local first = redis.call('ZRANGE', zkey, 0, 0)[1]
  if not first then
    redis.call('HSET', ikey, 'earliest_offset', '-1', 'latest_offset', '-1', 'segment_count', '0',
               'total_bytes', '0', 'updated_ms', now)
    return
  end
  local last = redis.call('ZRANGE', zkey, -1, -1)[1]
  redis.call('HSET', ikey, 'earliest_offset', num(string.sub(first, 1, 20)),
             'latest_offset', num(string.sub(last, 22, 41)),
             'segment_count', tostring(redis.call('ZCARD', zkey)), 'updated_ms', now)
end
"""

# insert_time(zkey, tkey, member, own, size, tail): add the segment (already in the segments zset) to the
# time index: score = the running max of max_timestamp up to it in offset order; later entries whose
# score is below that are raised to it (module doc of the package, "Time index"). ``tail`` ends the
# member: ':{min_timestamp}' when that is exact, else '' (``time_member``)
_LUA_TIME_INSERT = """
local function insert_time(zkey, tkey, member, own, size, tail)
  local rank = redis.call('ZRANK', zkey, member)
  local run = tonumber(own)
  if rank > 0 then
    local p = redis.call('ZRANGE', tkey, rank - 1, rank - 1, 'WITHSCORES')
    if p[2] and tonumber(p[2]) > run then run = tonumber(p[2]) end
  end
  -- collect first, then raise: a raised entry would sort after those not raised yet
  local raised, i = {}, rank
  while true do
    local n = redis.call('ZRANGE', tkey, i, i, 'WITHSCORES')
    if (not n[1]) or tonumber(n[2]) >= run then break end
    raised[#raised + 1] = n[1]
    i = i + 1
  end
  local score = string.format('%.0f', run)
  for _, m in ipairs(raised) do redis.call('ZADD', tkey, score, m) end
  redis.call('ZADD', tkey, score, member .. ':' .. own .. ':' .. size .. tail)
end
"""

# remove_time(tkey, ikey, rank, member): drop the segment at ``rank`` (its rank in the segments zset
# before it was removed) from the time index and lower the running max of the entries after it
# (stops at the first one that keeps its score). An index that disagrees loses the layout mark.
_LUA_TIME_REMOVE = """
local function remove_time(tkey, ikey, rank, member)
  local cur = redis.call('ZRANGE', tkey, rank, rank)[1]
  if (not cur) or string.sub(cur, 1, 41) ~= member then
    redis.call('HDEL', ikey, 'layout')
    return
  end
  redis.call('ZREM', tkey, cur)
  local run = nil
  if rank > 0 then
    local p = redis.call('ZRANGE', tkey, rank - 1, rank - 1, 'WITHSCORES')
    if p[2] then run = tonumber(p[2]) end
  end
  local i = rank
  while true do
    local n = redis.call('ZRANGE', tkey, i, i, 'WITHSCORES')
    if not n[1] then break end
    local new = tonumber(string.match(n[1], '^[0-9]+:[0-9]+:(-?[0-9]+)'))
    if run and run > new then new = run end
    if new == tonumber(n[2]) then break end
    redis.call('ZADD', tkey, string.format('%.0f', new), n[1])
    run = new
    i = i + 1
  end
end
"""

# KEYS: segments zset, segment hash (by first offset), info hash, coverage hash, time index zset.
# ARGV: member, first, last, size, checksum, now_ms, last + 1, base, max_timestamp, records in range (>= 0),
#       the time index member's tail (':{exact min_timestamp}' or ''), field1, value1, ...  (all strings)
# Same first offset: a no-op when last, checksum, size and base offset are the same, else a conflict.
# Returns {'registered'} | {'noop'} | {'conflict', member, hash field/values...} | {'overlap', member}
_REGISTER_LUA = (
    _LUA_NUM
    + _LUA_RAISE
    + _LUA_REFRESH
    + _LUA_TIME_INSERT
    + """
local zkey, hkey, ikey, ckey, tkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local member, base, last, size, checksum, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local pbase, plast = string.sub(member, 1, 20), string.sub(member, 22, 41)
local prev = redis.call('ZREVRANGEBYSCORE', zkey, base, '-inf', 'LIMIT', 0, 1)[1]
if prev then
  if string.sub(prev, 1, 20) == pbase then
    local cur = redis.call('HMGET', hkey, 'last_offset', 'checksum', 'size', 'base_offset')
    if prev == member and cur[1] == last and cur[2] == checksum and cur[3] == size and cur[4] == ARGV[8] then
      raise(ckey, 'next_offset', ARGV[7])
      return {'noop'}
    end
    local reply = {'conflict', prev}
    for _, v in ipairs(redis.call('HGETALL', hkey)) do reply[#reply + 1] = v end
    return reply
  end
  if string.sub(prev, 22, 41) >= pbase then return {'overlap', prev} end
end
local nxt = redis.call('ZRANGEBYSCORE', zkey, '(' .. base, '+inf', 'LIMIT', 0, 1)[1]
if nxt and string.sub(nxt, 1, 20) <= plast then return {'overlap', nxt} end
local fresh = redis.call('ZCARD', zkey) == 0
local indexed = fresh or redis.call('HGET', ikey, 'layout') == '2'
redis.call('ZADD', zkey, base, member)
redis.call('DEL', hkey)
redis.call('HSET', hkey, unpack(ARGV, 12))
if indexed then
  if fresh then
    redis.call('DEL', tkey)
    redis.call('HSET', ikey, 'layout', '2', 'records', '0')
  end
  insert_time(zkey, tkey, member, ARGV[9], size, ARGV[11])
  redis.call('HINCRBY', ikey, 'records', ARGV[10])
end
refresh(zkey, ikey, now)
redis.call('HINCRBY', ikey, 'total_bytes', size)
raise(ckey, 'next_offset', ARGV[7])
return {'registered'}
"""
)

# KEYS: segments zset, segment hash, info hash, gaps zset, gap-details hash, coverage hash, time index zset.
# ARGV: first offset (the member's score), now_ms.  Returns false (nothing there) or {member, hash field/values...}.
_DELETE_LUA = (
    _LUA_NUM
    + _LUA_RAISE
    + _LUA_REFRESH
    + _LUA_TIME_REMOVE
    + """
local zkey, hkey, ikey, gkey, dkey, ckey, tkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local member = redis.call('ZRANGEBYSCORE', zkey, ARGV[1], ARGV[1], 'LIMIT', 0, 1)[1]
if not member then return false end
local rank = redis.call('ZRANK', zkey, member)
local oldest = rank == 0
local fields = redis.call('HGETALL', hkey)
local size = redis.call('HGET', hkey, 'size')
local counts = redis.call('HMGET', hkey, 'record_count', 'range_records', 'base_offset', 'first_offset')
redis.call('ZREM', zkey, member)
if redis.call('HGET', ikey, 'layout') == '2' then
  remove_time(tkey, ikey, rank, member)
  local n = counts[1]
  if counts[4] and counts[4] ~= counts[3] then n = counts[2] end
  if n and tonumber(n) and tonumber(n) > 0 then redis.call('HINCRBY', ikey, 'records', '-' .. n) end
end
redis.call('DEL', hkey)
refresh(zkey, ikey, ARGV[2])
local first = redis.call('ZRANGE', zkey, 0, 0)[1]
if first then
  if size then redis.call('HINCRBY', ikey, 'total_bytes', '-' .. size) end
end
-- forget gaps retention has moved past: ending before the new earliest offset (or, with no
-- segment left, at or before the deleted segment's last offset); compared as 20-digit strings
local bound, inclusive = string.sub(member, 22, 41), true
if first then bound, inclusive = string.sub(first, 1, 20), false end
for _, g in ipairs(redis.call('ZRANGEBYSCORE', gkey, '-inf', num(bound))) do
  local gend = string.sub(g, 22, 41)
  if gend < bound or (inclusive and gend == bound) then
    redis.call('ZREM', gkey, g)
    redis.call('HDEL', dkey, g)
  end
end
-- deleting the oldest segment moves the remote log start: offsets below the new earliest offset
-- (or past the deleted segment, with none left) were deleted by remote retention
if oldest then
  local expired = string.format('%.0f', tonumber(string.sub(member, 22, 41)) + 1)
  if first then expired = num(string.sub(first, 1, 20)) end
  raise(ckey, 'expired_until', expired)
end
local reply = {member}
for _, v in ipairs(fields) do reply[#reply + 1] = v end
return reply
"""
)

# KEYS: gaps zset, gap-details hash, coverage hash.  ARGV: member, start, details JSON, end + 1.
# Returns 1 (added) or 0.
_GAP_LUA = (
    _LUA_RAISE
    + """
raise(KEYS[3], 'next_offset', ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
"""
)

# KEYS: coverage hash.  ARGV: start offset, observed_ms.  Sets the coverage start unless one is
# there (the first observation wins); returns the stored {start_offset, observed_ms}.
_COVERAGE_START_LUA = """
local cur = redis.call('HMGET', KEYS[1], 'start_offset', 'observed_ms')
if cur[1] then return cur end
redis.call('HSET', KEYS[1], 'start_offset', ARGV[1], 'observed_ms', ARGV[2])
return {ARGV[1], ARGV[2]}
"""

# KEYS: coverage hash.  ARGV: field, value.  Raises a monotonic mark (rebuild restores them).
_RAISE_LUA = _LUA_RAISE + """
raise(KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# KEYS: segments zset, info hash, gaps zset, gap-details hash, coverage hash, then the segment hashes.
# ARGV: the segments zset's members as read before. Deletes everything only if the zset still
# holds exactly those members (else returns -1: read again); returns the number of segments.
_CLEAR_LUA = """
local current = redis.call('ZRANGE', KEYS[1], 0, -1)
if #current ~= #ARGV then return -1 end
for i = 1, #ARGV do
  if current[i] ~= ARGV[i] then return -1 end
end
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
return #ARGV
"""

# KEYS: segment hash.  ARGV: checksum, files, sparse_index (base64 text; "" leaves the field as it
# is).  Sets the segment's files (and sparse index) only while the hash holds this very segment
# (same checksum): a segment deleted or replaced meanwhile is left alone.
_SET_FILES_LUA = """
local cur = redis.call('HGET', KEYS[1], 'checksum')
if cur ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'files', ARGV[2])
if ARGV[3] and ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'sparse_index', ARGV[3]) end
return 1
"""


# KEYS: segments zset, info hash, time index zset.  ARGV: records, n, the n segment members as read,
# then (score, time member) pairs.  The migration's last step for a partition (``_migrate``): writes
# the time index and the summary and sets ``layout`` 2, only if the segments zset still holds exactly
# those members (else -1: read again).  Returns n.
_INDEX_LUA = """
local n = tonumber(ARGV[2])
local current = redis.call('ZRANGE', KEYS[1], 0, -1)
if #current ~= n then return -1 end
for i = 1, n do
  if current[i] ~= ARGV[2 + i] then return -1 end
end
if n == 0 and redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
redis.call('DEL', KEYS[3])
for i = 3 + n, #ARGV, 2 do redis.call('ZADD', KEYS[3], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[2], 'records', ARGV[1], 'layout', '2')
return n
"""

# KEYS: segment hash.  ARGV: checksum, files, then field/value pairs.  Rewrites the hash with these
# fields (the migration drops ``sparse_index`` and lets Redis store the hash compactly again: a hash
# that once held a long value stays a hash table until rewritten) only while it holds this very
# segment with these files (a concurrent ``add_files`` or re-registration wins).  Returns 1 or 0.
_REWRITE_LUA = """
local cur = redis.call('HMGET', KEYS[1], 'checksum', 'files')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
return 1
"""
