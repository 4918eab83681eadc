-- The claim orders of contract version 4, put after _lib.lua and _flow.lua in front of
-- claim_due.lua, which calls claim_in_order() when the queue's own control ('*') sets fair
-- (a key prefix) or aging (seconds per step of priority). A queue without either is claimed
-- by claim_due.lua's own walk and never comes here.
--
-- The candidates are the due entries of every priority's pending and in-flight sets and of
-- the held sets of every key whose control lets a task through when the claim begins (a key
-- whose control holds back now holds back every task of its held sets: they have no rank).
-- Each such sorted set is a *source*, read in pages of ORDER_PAGE by rank; the sources are
-- merged into one stream in the order within a group:
--   * strict: highest priority first, then oldest due (the score), then id;
--   * aging: oldest aged due time first (the score less round(priority × aging × 10^6) µs),
--     then highest priority, then id.
--
-- Without fair (aging alone) the stream is the claim order: it is read lazily and each task
-- visited in turn, so a claim reads about as many entries as it visits (O(levels × page)).
--
-- With fair every candidate is read first, before the claim takes anything: its keys give its
-- group (its first key starting with the prefix, '' for none) and whether a control holds it
-- back from the start (then it has no rank; one in a pending or in-flight set is moved to a
-- held set, as claim_due.lua does, so later claims need not read it again). As the stream is
-- in each group's order, a task's rank is how many of its group came before it; the claim
-- visits rank 0 of every group (in stream order), then rank 1, and so on. That is one read of
-- every due task per claim: the price of an exact order without a per-group index.
--
-- Visiting a task claims it, or skips it when a control holds it back by now (a limit used
-- up by the tasks claimed before it): claim_due.lua's visit().

local ORDER_PAGE = 512

-- A source: the due entries (score <= now) of sorted set `set` (the key base's `name`), of
-- priority p, PENDING (`pending`) or IN_FLIGHT with a lapsed lease; `held` the held set's
-- name for a held set. `fetched` entries were read, `removed` of them left the due range
-- since (claimed, moved): the next page starts at fetched - removed.
local function new_source(set, p, pending, held, now)
  return {set = set, p = p, pending = pending, held = held, now = now, buf = {}, pos = 1,
    fetched = 0, removed = 0, done = false, closed = false}
end

-- The source's next entry as {id, score (text), due (number), p, source}, or nil.
local function head(s)
  if s.closed then
    return nil
  end
  if s.pos > #s.buf then
    if s.done then
      return nil
    end
    -- by rank, not by score with an offset (which Redis walks entry by entry): the due
    -- entries are the set's first, and an entry leaving them only moves later ones up
    local start = s.fetched - s.removed
    local page = s.page or ORDER_PAGE
    local got = redis.call('ZRANGE', s.set, start, start + page - 1, 'WITHSCORES')
    s.done = #got < 2 * page
    local n = #got
    while n > 0 and tonumber(got[n]) > s.now do
      n = n - 2
      s.done = true
    end
    for i = #got, n + 1, -1 do
      got[i] = nil
    end
    s.buf, s.pos = got, 1
    s.fetched = s.fetched + n / 2
    if n == 0 then
      return nil
    end
  end
  local e = s.peeked
  if e == nil or e.pos ~= s.pos or e.buf ~= s.buf then
    e = {id = s.buf[s.pos], score = s.buf[s.pos + 1], due = tonumber(s.buf[s.pos + 1]),
      p = s.p, source = s, pos = s.pos, buf = s.buf}
    s.peeked = e
  end
  return e
end

-- The order within a group: a function less(a, b) on two entries.
local function group_order(aging)
  if aging == nil then
    return function(a, b)
      if a.p ~= b.p then
        return a.p > b.p
      end
      if a.due ~= b.due then
        return a.due < b.due
      end
      return bytes_less(a.id, b.id)
    end
  end
  local shift = {}
  for p = MIN_PRIORITY, MAX_PRIORITY do
    shift[p] = math.floor(p * aging * 1000000 + 0.5)
  end
  return function(a, b)
    local x, y = a.due - shift[a.p], b.due - shift[b.p]
    if x ~= y then
      return x < y
    end
    if a.p ~= b.p then
      return a.p > b.p
    end
    return bytes_less(a.id, b.id)
  end
end

-- The sources' entries merged into one stream in `less` order: next() gives the best head
-- and moves past it. A source with no head left (read to its end, or closed) is dropped.
local function merged(sources, less)
  local live = {}
  for i, s in ipairs(sources) do
    live[i] = s
  end
  return function()
    local best = nil
    local i = 1
    while i <= #live do
      local e = head(live[i])
      if e == nil then
        table.remove(live, i)
      else
        if best == nil or less(e, best) then
          best = e
        end
        i = i + 1
      end
    end
    if best then
      best.source.pos = best.source.pos + 2
    end
    return best
  end
end

-- The first of a task's flow keys (after its handler's key, keys[1]) that starts with
-- `prefix`, or '' (the group of the tasks without one).
local function fair_group(keys, prefix)
  for i = 2, #keys do
    if string.sub(keys[i], 1, #prefix) == prefix then
      return keys[i]
    end
  end
  return ''
end

-- The claim in the order control q (the queue's own, with fair or aging) asks for. `ctx`
-- holds claim_due.lua's pieces: base, now, cap, out, control(k), capacity_of(c),
-- holder(keys), park(id, key, p, from_pending, score, k), visit(id, p, from_pending, score,
-- held) (returns the key that held the task back, or nil), parked() and budget.
-- The fair claim: the group sets of _lib.lua ('fair:<p>:<group>'), each group's sets merged
-- into its claim order and read lazily in pages of about the claim's size, each entry checked
-- against the set that holds the task (the group sets are kept by every script that indexes
-- a task; an entry found stale is mended or dropped). Every group's first task that no
-- control holds back from the start comes before any group's second: the claim reads about
-- (groups x levels) pages and the tasks it visits, however deep a group's backlog (tasks of a
-- group held back by a key other than the group's own are read past). A group whose own key
-- holds its tasks back is passed over whole.
local function claim_by_groups(ctx, q, done)
  local base, now = ctx.base, ctx.now
  if redis.call('GET', base .. 'fairidx') ~= q.fair then
    regroup(base, q.fair) -- made fair before its tasks had group sets (an upgraded store)
  end
  local page = math.min(ORDER_PAGE, math.max(2 * ctx.cap, 32))
  local groups, names = {}, {}
  if redis.call('EXISTS', base .. 'fairsets') == 1 then
    for _, name in ipairs(redis.call('SMEMBERS', base .. 'fairsets')) do
      local p, g = string.match(name, '^fair:(%-?%d+):(.*)$')
      if p and redis.call('EXISTS', base .. name) == 1 then
        if groups[g] == nil then
          groups[g] = {}
          names[#names + 1] = g
        end
        local s = new_source(base .. name, tonumber(p), nil, nil, now)
        s.page = page
        table.insert(groups[g], s)
      else
        redis.call('SREM', base .. 'fairsets', name)
      end
    end
  end
  table.sort(names, bytes_less)
  local less = group_order(q.aging)

  -- The group's next entry that no control holds back from the start, checked against the
  -- set that holds its task, with what visit() needs; nil when the group has no more.
  local function pull(st)
    while true do
      local e = st.next()
      if e == nil then
        return nil
      end
      local s = e.source
      local key = task_key(base, e.id)
      local set, p, kind, held = find_live(base, key, e.id)
      local score = set and redis.call('ZSCORE', set, e.id)
      if not set then
        redis.call('ZREM', s.set, e.id) -- a task no longer live
        s.removed = s.removed + 1
      elseif tonumber(score) ~= e.due then
        redis.call('ZADD', s.set, score, e.id) -- mended: its score in the set that holds it
        if tonumber(score) > now then
          s.removed = s.removed + 1
        end
      else
        local keys = task_flow_keys(key)
        if not ctx.closed_from_start(keys) then
          e.p, e.pending, e.held = p, kind == 'pending', held
          return e
        end
      end
    end
  end

  local streams = {}
  for _, g in ipairs(names) do
    if g == '' or not ctx.closed_from_start({g}) then
      local st = {g = g, next = merged(groups[g], less), rank = 0}
      st.head = pull(st)
      if st.head then
        streams[#streams + 1] = st
      end
    end
  end
  while not done() do
    local best = nil
    for _, st in ipairs(streams) do
      if st.head and (best == nil or st.rank < best.rank
          or (st.rank == best.rank and less(st.head, best.head))) then
        best = st
      end
    end
    if best == nil then
      break
    end
    local e = best.head
    local k = ctx.visit(e.id, e.p, e.pending, e.score, e.held)
    if k == nil then
      e.source.removed = e.source.removed + 1 -- claimed: leased past now
    end
    best.rank = best.rank + 1
    if k ~= nil and k == best.g and best.g ~= '' then
      best.head = nil -- the group's own key holds back the rest of its tasks in this claim
    else
      best.head = pull(best)
    end
  end
end

local function claim_in_order(ctx, q)
  local base, now = ctx.base, ctx.now
  local sources, held_source = {}, {}
  local level_list = levels(base)
  for _, level in ipairs(level_list) do
    local p = tonumber(level)
    sources[#sources + 1] = new_source(pending_key(base, p), p, true, nil, now)
    sources[#sources + 1] = new_source(inflight_key(base, p), p, false, nil, now)
  end
  if redis.call('EXISTS', base .. 'heldkeys') == 1 then
    for _, name in ipairs(redis.call('SMEMBERS', base .. 'heldkeys')) do
      local kind, p, k = parse_held(name)
      if kind and ctx.capacity_of(ctx.control(k)) >= 1 then
        local s = new_source(base .. name, p, kind == 'held', name, now)
        s.key = k
        sources[#sources + 1] = s
        held_source[name] = s
      end
    end
  end
  local next_entry = merged(sources, group_order(q.aging))

  -- Visit entry e; keep its source's offset and the sources a hold closes up to date.
  local function visit(e)
    local s = e.source
    local k = ctx.visit(e.id, e.p, s.pending, e.score, s.held)
    if k == nil or s.held == nil then
      s.removed = s.removed + 1 -- claimed, dropped, or moved to a held set
    end
    if k then
      -- k holds back every later task of its held sets in this claim: gates, slots and
      -- tokens only go down (and a task moved there must not shift an offset)
      for _, hs in pairs(held_source) do
        if hs.key == k then
          hs.closed = true
        end
      end
    end
  end

  -- Tasks moved aside while ranking count against a budget of their own: the claim still
  -- takes what it ranked.
  local parked_before = 0
  local function done()
    return #ctx.out >= ctx.cap or ctx.parked() - parked_before >= ctx.budget
  end

  if q.fair == nil then
    while not done() do
      local e = next_entry()
      if e == nil then
        break
      end
      visit(e)
    end
  else
    claim_by_groups(ctx, q, done)
  end
  for _, level in ipairs(level_list) do
    drop_level_if_empty(base, tonumber(level))
  end
end
