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

local CLOSE = { [123] = "}}", [37] = "%}", [35] = "#}" } -- after "{": "{", "%", "#"
local BLANK = { [32] = true, [9] = true }                   -- " ", "\t"

-- Compile template text into Lua source. Returns the source and the table of its literal
-- texts: the chunk puts literal k as _L[k] (passed in, not written into the code as a
-- quoted string: 86 KB of kernel text would be quoted, then lexed back, every render),
-- followed by as many newlines as it holds, so the chunk keeps the template's layout.
-- Every search is plain and looks at each byte once or a few times: every "{" is looked
-- at (a pattern search tried a match at each byte), each newline is found once by a
-- cursor that only moves forward, and a tag looks back over blanks only.
function M.translate(text, chunkname)
  local code = { "local _put, _s, _L = ...; " }
  local lits = {}
  local pos, line = 1, 1
  local n = #text
  local nl_next = text:find("\n", 1, true) -- the first newline not yet counted
  local function newlines_to(b)             -- newlines after those counted, up to b
    local k = 0
    while nl_next and nl_next <= b do
      k = k + 1
      nl_next = text:find("\n", nl_next + 1, true)
    end
    return k
  end
  local function put_literal(a, b, nl) -- text[a..b], if not empty, holding nl newlines
    if b >= a then
      lits[#lits + 1] = text:sub(a, b)
      code[#code + 1] = "_put(_L[" .. #lits .. "])" .. string.rep("\n", nl) .. " "
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
      put_literal(pos, n, newlines_to(n))
      break
    end
    local kind = text:sub(s + 1, s + 1)
    local e = s + 1
    local cs, ce = text:find(close, e + 1, true)
    local nl_lit = newlines_to(s - 1)
    line = line + nl_lit
    if not cs then
      error(string.format("%s:%d: unclosed {%s tag", chunkname, line, kind), 0)
    end
    local body = text:sub(e + 1, cs - 1)
    local lit_end = s - 1
    -- A statement or comment alone on its line emits no output line.
    if kind ~= "{" then
      -- before the tag: blanks back to the line's start, inside this literal
      local j = s - 1
      while j >= pos and BLANK[text:byte(j)] do j = j - 1 end
      local before = j < pos and pos == 1 or j >= pos - 1 and text:byte(j) == 10
      -- blanks then the end of the line (or of the text) after the tag
      local _, ae = text:find("^[ \t]*", ce + 1)
      local nl = text:byte(ae + 1) == 10
      if before and (nl or ae == n) then
        lit_end = j
        ce = nl and ae + 1 or ae
        if nl then body = body .. "\n" end
      end
    end
    put_literal(pos, lit_end, nl_lit)
    local nl_tag = newlines_to(ce)
    if kind == "{" then
      code[#code + 1] = "_put(_s((" .. body .. "), " .. string.format("%q", chunkname .. ":" .. line) .. ")) "
    elseif kind == "%" then
      code[#code + 1] = body .. " "
    else
      code[#code + 1] = string.rep("\n", nl_tag) -- the comment's own and the line's end
    end
    line = line + nl_tag
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
