-- template.lua - the template engine: {{ expr }} inserts a value, {% code %} runs Lua,
-- {# note #} is dropped. A template compiles to one Lua chunk that keeps the template's
-- line layout (line n of the template is line n of the chunk), so an error in a
-- template is reported at the template's own line: "host/kernel.c.tpl:42: ...".
-- A line holding only a {% %} tag (and blanks) produces no output line.
local M = {}

-- Values a template may insert: integers print as integers, strings as they are;
-- anything else (nil, tables, floats that need a chosen precision) is an error, so a
-- typo in a template never turns into "nil" in generated C.
local function to_text(v, where)
  local t = type(v)
  if t == "string" then return v end
  if math.type(v) == "integer" then return string.format("%d", v) end
  if t == "boolean" then return v and "1" or "0" end
  if t == "number" then
    error(string.format("%s: a float needs an explicit format (f64()/f32())", where), 3)
  end
  error(string.format("%s: expression is %s, not text", where, t), 3)
end

-- Newlines in text[a..b], found by plain search (no substring is made).
local function count_newlines(text, a, b)
  local n = 0
  local i = text:find("\n", a, true)
  while i and i <= b do
    n = n + 1
    i = text:find("\n", i + 1, true)
  end
  return n
end

local CLOSE = { [123] = "}}", [37] = "%}", [35] = "#}" } -- after "{": "{", "%", "#"

-- Compile template text into Lua source. Returns the source and the table of its literal
-- texts: the chunk puts literal k as _L[k] (passed in, not written into the code as a
-- quoted string: 86 KB of kernel text would be quoted, then lexed back, every render),
-- followed by as many newlines as it holds, so the chunk keeps the template's layout.
-- The search is plain (every "{" looked at, no pattern): a pattern search tries a match
-- at each byte of the text.
function M.translate(text, chunkname)
  local code = { "local _put, _s, _L = ...; " }
  local lits = {}
  local pos, line = 1, 1
  local n = #text
  local function put_literal(a, b) -- text[a..b], if not empty
    if b >= a then
      lits[#lits + 1] = text:sub(a, b)
      code[#code + 1] = "_put(_L[" .. #lits .. "])" .. string.rep("\n", count_newlines(text, a, b)) .. " "
    end
  end
  while pos <= n do
    -- the next tag: a "{" followed by "{", "%" or "#"
    local s, close = text:find("{", pos, true), nil
    while s do
      close = CLOSE[text:byte(s + 1)]
      if close then break end
      s = text:find("{", s + 1, true)
    end
    if not s then
      put_literal(pos, n)
      break
    end
    local kind = text:sub(s + 1, s + 1)
    local e = s + 1
    local cs, ce = text:find(close, e + 1, true)
    line = line + count_newlines(text, pos, s - 1)
    if not cs then
      error(string.format("%s:%d: unclosed {%s tag", chunkname, line, kind), 0)
    end
    local body = text:sub(e + 1, cs - 1)
    local lit_end = s - 1
    -- A statement or comment alone on its line emits no output line.
    if kind ~= "{" then
      -- the line's text before the tag, when all of it belongs to this literal and is blank
      local ls = s
      while ls > 1 and text:byte(ls - 1) ~= 10 do ls = ls - 1 end
      local before = ls >= pos and select(2, text:find("^[ \t]*", ls)) == s - 1
      -- blanks then the end of the line (or of the text) after the tag
      local _, ae = text:find("^[ \t]*", ce + 1)
      local nl = text:byte(ae + 1) == 10
      if before and (nl or ae == n) then
        lit_end = ls - 1
        ce = nl and ae + 1 or ae
        if nl then body = body .. "\n" end
      end
    end
    put_literal(pos, lit_end)
    if kind == "{" then
      code[#code + 1] = "_put(_s((" .. body .. "), " .. string.format("%q", chunkname .. ":" .. line) .. ")) "
    elseif kind == "%" then
      code[#code + 1] = body .. " "
    else
      code[#code + 1] = string.rep("\n", count_newlines(body, 1, #body))
    end
    line = line + count_newlines(text, s, ce)
    pos = ce + 1
  end
  return table.concat(code), lits
end

-- Render a template text with env (a table of names the template sees; the generator's
-- safe globals are visible behind it). Returns the output text.
function M.render(text, chunkname, env)
  local src, lits = M.translate(text, chunkname)
  local fn = sandbox_load(src, "@" .. chunkname, env)
  local out = {}
  fn(function(s) out[#out + 1] = s end, to_text, lits)
  return table.concat(out)
end

return M
