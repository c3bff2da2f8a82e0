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

-- Count newlines in s.
local function newlines(s)
  local _, n = s:gsub("\n", "")
  return n
end

-- Compile template text into Lua source. Returns the source.
function M.translate(text, chunkname)
  local code = { "local _put, _s = ...; " }
  local pos, line = 1, 1
  local n = #text
  local pending = "" -- literal text not yet emitted
  local function flush()
    if #pending > 0 then
      -- %q writes a newline as backslash + newline: the chunk keeps the layout.
      code[#code + 1] = "_put(" .. string.format("%q", pending) .. ") "
      pending = ""
    end
  end
  while pos <= n do
    local s, e, kind = text:find("{([{%%#])", pos)
    if not s then
      pending = pending .. text:sub(pos)
      break
    end
    local literal = text:sub(pos, s - 1)
    local close = ({ ["{"] = "}}", ["%"] = "%}", ["#"] = "#}" })[kind]
    local cs, ce = text:find(close, e + 1, true)
    line = line + newlines(text:sub(pos, s - 1))
    if not cs then
      error(string.format("%s:%d: unclosed {%s tag", chunkname, line, kind), 0)
    end
    local body = text:sub(e + 1, cs - 1)
    -- A statement or comment alone on its line emits no output line.
    local alone = false
    if kind ~= "{" then
      -- the line's text before the tag, when all of it belongs to this literal
      local ls = s
      while ls > 1 and text:sub(ls - 1, ls - 1) ~= "\n" do ls = ls - 1 end
      local before = (ls >= pos) and text:sub(ls, s - 1):match("^[ \t]*$") or nil
      local after = text:match("^[ \t]*\n", ce + 1) or text:match("^[ \t]*$", ce + 1)
      if before and after then
        alone = true
        literal = literal:sub(1, #literal - #before)
        ce = ce + #after
        body = body .. string.rep("\n", newlines(after))
      end
    end
    pending = pending .. literal
    flush()
    if kind == "{" then
      code[#code + 1] = "_put(_s((" .. body .. "), " .. string.format("%q", chunkname .. ":" .. line) .. ")) "
    elseif kind == "%" then
      code[#code + 1] = body .. " "
    else
      code[#code + 1] = string.rep("\n", newlines(body))
    end
    line = line + newlines(text:sub(s, ce))
    pos = ce + 1
  end
  flush()
  return table.concat(code)
end

-- Render a template text with env (a table of names the template sees; the generator's
-- safe globals are visible behind it). Returns the output text.
function M.render(text, chunkname, env)
  local src = M.translate(text, chunkname)
  local fn = sandbox_load(src, "@" .. chunkname, env)
  local out = {}
  fn(function(s) out[#out + 1] = s end, to_text)
  return table.concat(out)
end

return M
