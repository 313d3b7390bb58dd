-- Engram for Neovim: which agent sessions wrote this code, and why.
--
--   require("engram").setup({
--     cmd = { "engram-lsp" },                 -- how to start the server
--     settings = { codeLens = { minSessions = 1 } },  -- the server's "engram" settings
--     codelens = true,                        -- show `N sessions` lenses, refreshed automatically
--     explain = { layout = "float" },         -- or "split"
--   })
--
-- Works on Neovim >= 0.10: `vim.lsp.config`/`vim.lsp.enable` where they exist (0.11+), else a
-- FileType autocmd calling `vim.lsp.start`.
local M = {}

local NAME = "engram"

local defaults = {
  cmd = nil, -- default: lsp/engram.lua's { "engram-lsp" }
  root_markers = { ".engram", ".git" },
  settings = {},
  codelens = true,
  progress = true, -- echo indexing progress ($/progress) in the command line
  explain = { layout = "float", before = nil, after = nil, width = 100, height = 40 },
  view = { before = 5, after = 5 },
}

M.config = vim.deepcopy(defaults)
M.state = { refreshes = 0, last_explain = nil, view = nil }

local function has(feature)
  return vim.fn.has(feature) == 1
end

local function notify(msg, level)
  vim.notify("Engram: " .. msg, level or vim.log.levels.INFO)
end

--- The plugin's root directory (…/clients/neovim).
local function plugin_root()
  local source = debug.getinfo(1, "S").source:sub(2)
  return vim.fn.fnamemodify(source, ":p:h:h:h")
end

--- The server config: lsp/engram.lua with the user's options on top.
function M.server_config()
  local ok, base = pcall(dofile, plugin_root() .. "/lsp/engram.lua")
  base = ok and base or { cmd = { "engram-lsp" }, capabilities = {}, handlers = {} }
  local cfg = vim.deepcopy(base)
  cfg.cmd = M.config.cmd or cfg.cmd
  cfg.root_markers = M.config.root_markers or cfg.root_markers
  cfg.init_options = vim.deepcopy(M.config.settings)
  cfg.settings = { engram = vim.deepcopy(M.config.settings) }
  cfg.capabilities = vim.tbl_deep_extend("force", vim.lsp.protocol.make_client_capabilities(),
    base.capabilities or {})
  return cfg
end

--- The engram client attached to `bufnr` (default: current buffer), or nil.
function M.client(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local get = vim.lsp.get_clients or vim.lsp.get_active_clients
  return get({ name = NAME, bufnr = bufnr })[1]
end

--- client:request on 0.11+, client.request on 0.10.
local function request(client, method, params, handler, bufnr)
  if has("nvim-0.11") then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end
M.request = request

local function refresh_lenses(bufnr)
  if M.config.codelens and vim.api.nvim_buf_is_valid(bufnr) and M.client(bufnr) then
    vim.lsp.codelens.refresh({ bufnr = bufnr })
  end
end

--- Handler for the server's workspace/codeLens/refresh request.
function M.on_codelens_refresh(_)
  M.state.refreshes = M.state.refreshes + 1
  M.refresh_annotations()
  if not M.config.codelens then
    return
  end
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and M.client(buf) then
      vim.lsp.codelens.refresh({ bufnr = buf })
    end
  end
end

local function on_attach(bufnr)
  if not M.config.codelens then
    return
  end
  local group = vim.api.nvim_create_augroup("engram_lens_" .. bufnr, { clear = true })
  vim.api.nvim_create_autocmd({ "BufEnter", "InsertLeave", "BufWritePost" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      refresh_lenses(bufnr)
    end,
  })
  refresh_lenses(bufnr)
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(defaults), opts or {})
  local group = vim.api.nvim_create_augroup("engram", { clear = true })
  vim.api.nvim_create_autocmd("LspAttach", {
    group = group,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == NAME then
        on_attach(args.buf)
      end
    end,
  })
  if M.config.progress then
    vim.api.nvim_create_autocmd("LspProgress", {
      group = group,
      callback = function(args)
        local data = args.data or {}
        local client = data.client_id and vim.lsp.get_client_by_id(data.client_id)
        local value = data.params and data.params.value
        if not client or client.name ~= NAME or type(value) ~= "table" then
          return
        end
        local text = value.kind == "end" and ("Engram: " .. (value.message or "indexed"))
          or string.format("%s%s%s", value.title or "Engram", value.message and (": " .. value.message) or "",
            value.percentage and string.format(" (%d%%)", value.percentage) or "")
        M.state.progress = text
        vim.api.nvim_echo({ { text } }, false, {})
      end,
    })
  end
  local cfg = M.server_config()
  if vim.lsp.config and vim.lsp.enable then
    M.state.started_with = "vim.lsp.enable"
    vim.lsp.config(NAME, cfg)
    vim.lsp.enable(NAME)
  else
    M.state.started_with = "vim.lsp.start"
    vim.api.nvim_create_autocmd("FileType", {
      group = group,
      callback = function(args)
        M.start(args.buf, cfg)
      end,
    })
    for _, buf in ipairs(vim.api.nvim_list_bufs()) do
      if vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].filetype ~= "" then
        M.start(buf, cfg)
      end
    end
  end
end

--- Start (or reuse) the server for one buffer with vim.lsp.start (Neovim 0.10).
function M.start(bufnr, cfg)
  if vim.bo[bufnr].buftype ~= "" or vim.api.nvim_buf_get_name(bufnr) == "" then
    return
  end
  cfg = cfg or M.server_config()
  local root = vim.fs.root and vim.fs.root(bufnr, cfg.root_markers)
    or vim.fs.dirname(vim.fs.find(cfg.root_markers, {
      upward = true, path = vim.fs.dirname(vim.api.nvim_buf_get_name(bufnr)) })[1] or "")
  if not root or root == "" then
    return
  end
  return vim.lsp.start({
    name = NAME, cmd = cfg.cmd, root_dir = root, init_options = cfg.init_options,
    settings = cfg.settings, capabilities = cfg.capabilities, handlers = cfg.handlers,
  }, { bufnr = bufnr })
end

-- Rendering --------------------------------------------------------------------------------------

local function oneline(s, limit)
  s = tostring(s or ""):gsub("%s+", " ")
  limit = limit or 200
  if #s > limit then
    s = s:sub(1, limit) .. "…"
  end
  return s
end

local function pct(x)
  return type(x) == "number" and string.format("%d%%", math.floor(x * 100 + 0.5)) or "?"
end

local function add_block(lines, prefix, text)
  for _, l in ipairs(vim.split(tostring(text or ""), "\n", { plain = true })) do
    table.insert(lines, prefix .. l)
  end
end

--- Markdown lines for one window/view event.
function M.render_event(lines, ev, anchor)
  local mark = (anchor ~= nil and ev.offset == anchor) and " ◀" or ""
  local k = ev.k
  if k == "msg.in" then
    table.insert(lines, string.format("**User** `#%s`%s", ev.offset, mark))
    add_block(lines, "> ", ev.text)
  elseif k == "msg.out" then
    table.insert(lines, string.format("**Assistant** `#%s`%s", ev.offset, mark))
    add_block(lines, "", ev.text)
  elseif k == "tool.call" then
    local args = type(ev.args) == "table" and ev.args or {}
    local what = args.file_path or args.path or args.command or args.pattern or ""
    table.insert(lines, string.format("- `#%s` **%s** %s%s", ev.offset, ev.tool or "tool", oneline(what, 120), mark))
  elseif k == "tool.result" then
    table.insert(lines, string.format("- `#%s` → %s%s", ev.offset, oneline(ev.stdout, 120), mark))
  elseif k == "code.edit" or k == "code.read" then
    local r = ev.after_range or ev.range
    local where = type(r) == "table" and string.format(":%s-%s", r[1], r[2]) or ""
    table.insert(lines, string.format("- `#%s` %s `%s%s`%s", ev.offset,
      k == "code.edit" and "**edit**" or "read", ev.file or "?", where, mark))
    local body = ev.after_text or ev.text
    if type(body) == "string" and body ~= "" then
      body = body:gsub("%s+$", "")
      local fence = "```"
      while body:find(fence, 1, true) do
        fence = fence .. "`"
      end
      table.insert(lines, fence)
      add_block(lines, "", body)
      table.insert(lines, fence)
    end
  else
    table.insert(lines, string.format("- `#%s` %s%s", ev.offset, k or "?", mark))
  end
end

--- The explain result as Markdown lines.
function M.render_explain(result)
  local lines = {}
  local span = result.span or {}
  table.insert(lines, string.format("# Engram: %s:%s-%s", span.file or "?", span.start or "?", span["end"] or "?"))
  local sessions = result.sessions or {}
  if #sessions == 0 then
    table.insert(lines, "")
    table.insert(lines, "No agent session produced this code (as far as the index knows).")
    return lines
  end
  table.insert(lines, "")
  table.insert(lines, string.format("%d session%s", #sessions, #sessions == 1 and "" or "s"))
  for i, s in ipairs(sessions) do
    table.insert(lines, "")
    table.insert(lines, string.format("## %d. %s", i, oneline(s.label ~= vim.NIL and s.label or s.session, 100)))
    table.insert(lines, string.format("%s · %s · %s match · via %s · %s → %s · tape `%s`",
      s.harness or "?", s.model ~= vim.NIL and s.model or "?", pct(s.confidence), s.via or "?",
      s.first_t or "?", s.last_t or "?", s.tape_id or "?"))
    for _, w in ipairs(s.windows or {}) do
      table.insert(lines, "")
      table.insert(lines, string.format("### %s at event %s (%s)", w.kind or "anchor", w.anchor, pct(w.confidence)))
      if type(w.request) == "table" and w.request.text then
        table.insert(lines, "**Request:**")
        add_block(lines, "> ", oneline(w.request.text, 600))
      end
      if w.events == nil then
        table.insert(lines, string.format("_Transcript not included: :EngramView %s %s shows it._", s.tape_id or "?", w.anchor))
      end
      for _, ev in ipairs(w.events or {}) do
        M.render_event(lines, ev, w.anchor)
      end
    end
  end
  if type(result.lineage) == "table" and #result.lineage > 0 then
    table.insert(lines, "")
    table.insert(lines, string.format("Lineage: %d edge%s", #result.lineage, #result.lineage == 1 and "" or "s"))
  end
  return lines
end

local function scratch(name, lines)
  local buf = vim.fn.bufnr(name)
  if buf == -1 then
    buf = vim.api.nvim_create_buf(false, true)
    vim.api.nvim_buf_set_name(buf, name)
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = "markdown"
  vim.bo[buf].bufhidden = "hide"
  local win = vim.fn.bufwinid(buf)
  if win == -1 then
    vim.cmd("botright vsplit")
    win = vim.api.nvim_get_current_win()
    vim.api.nvim_win_set_buf(win, buf)
  else
    vim.api.nvim_set_current_win(win)
  end
  vim.keymap.set("n", "q", "<cmd>close<cr>", { buffer = buf, nowait = true })
  return buf, win
end

local function show_markdown(name, lines, layout)
  if layout == "split" then
    return scratch(name, lines)
  end
  local buf, win = vim.lsp.util.open_floating_preview(lines, "markdown", {
    border = "rounded", focus_id = name, max_width = M.config.explain.width,
    max_height = M.config.explain.height,
  })
  return buf, win
end

-- Commands ---------------------------------------------------------------------------------------

--- The client for the current buffer; `any` also accepts another buffer's (view/status from a
--- scratch buffer such as the explain split).
local function need_client(any)
  local client = M.client(0)
  if not client and any then
    local get = vim.lsp.get_clients or vim.lsp.get_active_clients
    client = get({ name = NAME })[1]
  end
  if not client then
    notify("no engram-lsp attached to this buffer (see :checkhealth engram)", vim.log.levels.WARN)
  end
  return client
end

--- :EngramExplain — the current function (the hover's block), or `opts.range` = {line1, line2}.
function M.explain(opts)
  opts = opts or {}
  local client = need_client()
  if not client then
    return
  end
  local bufnr = vim.api.nvim_get_current_buf()
  local uri = vim.uri_from_bufnr(bufnr)
  local layout = opts.split and "split" or (opts.layout or M.config.explain.layout)

  local function run(first, last) -- 0-based, inclusive
    local params = {
      textDocument = { uri = uri },
      range = { start = { line = first, character = 0 }, ["end"] = { line = last + 1, character = 0 } },
      before = M.config.explain.before, after = M.config.explain.after,
    }
    request(client, "engram/explain", params, function(err, result)
      if err then
        notify("explain failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
        return
      end
      M.state.last_explain = result
      M.state.last_explain_query = { uri = uri, range = params.range }
      local buf = show_markdown("engram://explain", M.render_explain(result), layout)
      if buf then
        vim.b[buf].engram_explain = result
      end
      M.state.explain_buf = buf
      if opts.on_done then
        opts.on_done(result, buf)
      end
    end, bufnr)
  end

  if opts.range then
    return run(opts.range[1] - 1, opts.range[2] - 1)
  end
  local cursor = vim.api.nvim_win_get_cursor(0)[1] - 1
  local hover_params = { textDocument = { uri = uri }, position = { line = cursor, character = 0 } }
  request(client, "textDocument/hover", hover_params, function(err, result)
    local r = (not err and type(result) == "table") and result.range or nil
    if r then
      local last = r["end"].line - ((r["end"].character == 0 and r["end"].line > r.start.line) and 1 or 0)
      run(r.start.line, last)
    else
      run(cursor, cursor)
    end
  end, bufnr)
end

--- :EngramView [next|prev|TAPE_ID [AT]] — step through a tape (default: the last explain's best session).
function M.view(args, on_done)
  args = args or {}
  local client = need_client(true)
  if not client then
    return
  end
  local v = M.state.view
  local page = M.config.view.before + M.config.view.after + 1
  local tape, at
  if args[1] == "next" or args[1] == "prev" then
    if not v then
      notify("nothing to step through yet: run :EngramExplain or :EngramView TAPE_ID", vim.log.levels.WARN)
      return
    end
    tape, at = v.tape_id, v.at + (args[1] == "next" and page or -page)
    if at < 0 then
      at = 0
    end
  elseif args[1] then
    tape, at = args[1], tonumber(args[2]) or 0
  else
    local s = M.state.last_explain and (M.state.last_explain.sessions or {})[1]
    if not s then
      notify("no session to view: run :EngramExplain first", vim.log.levels.WARN)
      return
    end
    local w = (s.windows or {})[1]
    tape, at = s.tape_id, w and w.anchor or 0
  end
  local params = { tapeId = tape, at = at, before = M.config.view.before, after = M.config.view.after }
  request(client, "engram/view", params, function(err, result)
    if err then
      notify("view failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    if not (v and v.tape_id == result.tape_id) then
      -- opening a session counts as using the answer (`engram used`: its salience goes up)
      request(client, "engram/used", { session = result.tape_id }, function(uerr, used)
        M.state.used = uerr and { error = uerr.message } or used
      end)
    end
    M.state.view = result
    local lines = {
      string.format("# Tape %s", result.tape_id),
      string.format("%s · %s · %s", result.harness or "?", result.model ~= vim.NIL and result.model or "?",
        oneline(result.label ~= vim.NIL and result.label or "", 80)),
      string.format("events %d–%d of %d (at %d)%s   ]] next · [[ previous · q close",
        result.range[1], result.range[2], result.n_events, result.at, result.live and " · live" or ""),
      "",
    }
    for _, ev in ipairs(result.events or {}) do
      M.render_event(lines, ev, result.at)
    end
    local buf = scratch("engram://view", lines)
    vim.bo[buf].modifiable = false
    vim.b[buf].engram_view = result
    M.state.view_buf = buf
    for lhs, dir in pairs({ ["]]"] = "next", ["[["] = "prev", ["<C-n>"] = "next", ["<C-p>"] = "prev" }) do
      vim.keymap.set("n", lhs, function()
        M.view({ dir })
      end, { buffer = buf, nowait = true, desc = "Engram: " .. dir .. " events" })
    end
    if on_done then
      on_done(result, buf)
    end
  end)
end

--- :EngramStatus — index counts, live sessions, last ingest, embedding state.
function M.status(on_done)
  local client = need_client(true)
  if not client then
    return
  end
  request(client, "engram/status", {}, function(err, result)
    if err then
      notify("status failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    local counts = type(result.counts) == "table" and result.counts or {}
    local server = result.server or {}
    local lines = {
      "# Engram status",
      "",
      string.format("- workspace: `%s`", server.root or result.root or "?"),
      string.format("- index: `%s`%s", result.index or "?", result.indexed and "" or " (not built yet)"),
      string.format("- sessions: %s (%s live), tapes: %s, events: %s",
        counts.sessions or 0, counts.live_sessions or 0, counts.tapes or 0, counts.events or 0),
      string.format("- last ingest: %s%s", result.last_ingest ~= vim.NIL and result.last_ingest or "never",
        server.ingesting and " (indexing now)" or ""),
      string.format("- watching: %s", table.concat(server.watching or {}, ", ")),
    }
    local emb = type(result.embedding) == "table" and result.embedding or {}
    table.insert(lines, string.format("- embedding: %s", emb.available and "available" or ("off (" .. tostring(emb.reason or "") .. ")")))
    if server.last_ingest_error and server.last_ingest_error ~= vim.NIL then
      table.insert(lines, "- last error: " .. tostring(server.last_ingest_error))
    end
    local buf = show_markdown("engram://status", lines, "float")
    if buf then
      vim.b[buf].engram_status = result
    end
    if on_done then
      on_done(result, lines)
    end
  end)
end

--- :EngramReindex — rebuild the index (progress shows through LspProgress).
function M.reindex()
  local client = need_client(true)
  if not client then
    return
  end
  request(client, "workspace/executeCommand", { command = "engram.reindex", arguments = {} }, function(err)
    if err then
      notify("reindex failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
    else
      notify("index rebuilt")
    end
  end)
end

-- Line annotation ---------------------------------------------------------------------------------

-- Eight colours that stay apart on dark and light backgrounds (Tableau 10's first eight); a session's
-- colour is its index in engram/annotate's answer (sessions in the order they first appear).
M.palette = { "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7" }
local annotate_ns = vim.api.nvim_create_namespace("engram_annotate")
M.annotate_ns = annotate_ns
M.state.annotations = {}

local function annotate_highlights()
  for i, color in ipairs(M.palette) do
    vim.api.nvim_set_hl(0, "EngramAnnotate" .. i, { fg = color, default = true })
  end
end

--- The marks for one engram/annotate answer: a coloured bar in the sign column on every line a
--- session wrote, and the session's request at the end of each run's first line.
function M.draw_annotation(bufnr, result)
  vim.api.nvim_buf_clear_namespace(bufnr, annotate_ns, 0, -1)
  annotate_highlights()
  local n = vim.api.nvim_buf_line_count(bufnr)
  for _, run in ipairs(result.runs or {}) do
    local session = (result.sessions or {})[run.session + 1]
    if session and run.start < n then
      local hl = "EngramAnnotate" .. (run.session % #M.palette + 1)
      for line = run.start, math.min(run["end"], n - 1) do
        vim.api.nvim_buf_set_extmark(bufnr, annotate_ns, line, 0, { sign_text = "▎", sign_hl_group = hl, priority = 5 })
      end
      local label = session.label ~= vim.NIL and session.label or session.session
      vim.api.nvim_buf_set_extmark(bufnr, annotate_ns, run.start, 0, {
        virt_text = { { string.format("◆ %s · %s", oneline(label, 60), session.harness or "agent"), hl } },
        virt_text_pos = "eol", hl_mode = "combine",
      })
    end
  end
end

--- Ask engram/annotate for `bufnr` and draw the answer (when the buffer has not changed meanwhile).
function M.refresh_annotation(bufnr, on_done)
  local client = M.client(bufnr)
  if not client or not vim.b[bufnr].engram_annotate then
    return
  end
  local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr) } }
  request(client, "engram/annotate", params, function(err, result)
    if not vim.api.nvim_buf_is_valid(bufnr) or not vim.b[bufnr].engram_annotate then
      return
    end
    if err then
      notify("annotate failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    local version = vim.lsp.util.buf_versions[bufnr]
    if result.version ~= vim.NIL and version ~= nil and result.version ~= version then
      return -- the buffer changed: the TextChanged autocmd asks again
    end
    M.state.annotations[bufnr] = result
    M.draw_annotation(bufnr, result)
    if on_done then
      on_done(result)
    end
  end, bufnr)
end

--- :EngramAnnotate [on|off] — toggle the line annotation of the current buffer.
function M.annotate(mode, on_done)
  local bufnr = vim.api.nvim_get_current_buf()
  local on = mode == "on" or (mode ~= "off" and not vim.b[bufnr].engram_annotate)
  local group = vim.api.nvim_create_augroup("engram_annotate_" .. bufnr, { clear = true })
  if not on then
    vim.b[bufnr].engram_annotate = false
    M.state.annotations[bufnr] = nil
    vim.api.nvim_buf_clear_namespace(bufnr, annotate_ns, 0, -1)
    if on_done then
      on_done(nil)
    end
    return
  end
  if not need_client() then
    return
  end
  vim.b[bufnr].engram_annotate = true
  local timer
  vim.api.nvim_create_autocmd({ "TextChanged", "TextChangedI", "BufWritePost" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      if timer then
        timer:stop()
      end
      timer = vim.defer_fn(function()
        M.refresh_annotation(bufnr)
      end, 400)
    end,
  })
  M.refresh_annotation(bufnr, on_done)
end

--- After an ingest (the server's workspace/codeLens/refresh): annotated buffers are asked again.
function M.refresh_annotations()
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.b[buf].engram_annotate then
      M.refresh_annotation(buf)
    end
  end
end

-- Workflow: review, stats, notes, feedback -------------------------------------------------------

local function pct0(x)
  return type(x) == "number" and string.format("%d%%", math.floor(x * 100 + 0.5)) or "–"
end

--- `<base>..HEAD`: the branch's upstream, else the remote's default branch, else main/master.
function M.default_review_range(cwd)
  local function git(args)
    local out = vim.fn.systemlist(vim.list_extend({ "git", "-C", cwd }, args))
    return vim.v.shell_error == 0 and out[1] and out[1] ~= "" and out[1] or nil
  end
  local base = git({ "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}" })
    or git({ "symbolic-ref", "--short", "refs/remotes/origin/HEAD" })
    or (git({ "rev-parse", "--verify", "--quiet", "main" }) and "main")
    or (git({ "rev-parse", "--verify", "--quiet", "master" }) and "master")
    or "HEAD~1"
  return base .. "..HEAD"
end

--- engram/review's answer as Markdown lines.
function M.render_review(r)
  local added, agent = r.added_lines or 0, r.agent_lines or 0
  local lines = {
    string.format("# Engram: review %s", r.range),
    "",
    string.format("%s of %d added lines written by agent sessions (%d), %d by hand; %d commits, %d with no session.",
      pct0(r.agent_share ~= vim.NIL and r.agent_share or nil), added, agent, added - agent, #(r.commits or {}),
      #(r.no_session_commits or {})),
  }
  for _, w in ipairs(r.warnings or {}) do
    table.insert(lines, "> ⚠ " .. oneline(w))
  end
  if #(r.sessions or {}) > 0 then
    vim.list_extend(lines, { "", "## Sessions", "" })
    for _, s in ipairs(r.sessions) do
      table.insert(lines, string.format("- `%s` %s · %s · %d lines: %s", tostring(s.session ~= vim.NIL and s.session or s.tape_id):sub(1, 12),
        s.harness ~= vim.NIL and s.harness or "?", s.model ~= vim.NIL and s.model or "?", s.lines or 0,
        oneline(s.label ~= vim.NIL and s.label or "", 120)))
    end
  end
  vim.list_extend(lines, { "", "## Commits", "" })
  for _, c in ipairs(r.commits or {}) do
    table.insert(lines, string.format("### `%s` %s", c.sha:sub(1, 7), oneline(c.subject, 100)))
    table.insert(lines, string.format("%s · %s · %d of %d added lines by agents", c.author or "?", c.t or "?",
      c.agent_lines or 0, c.added_lines or 0))
    if #(c.sessions or {}) == 0 then
      table.insert(lines, "- no session: written by hand (as far as the index knows)")
    end
    for _, s in ipairs(c.sessions or {}) do
      table.insert(lines, string.format("- %s · %s · %d lines", oneline(s.label ~= vim.NIL and s.label or s.session, 100),
        s.harness ~= vim.NIL and s.harness or "?", s.lines or 0))
    end
    table.insert(lines, "")
  end
  if #(r.dead_ends or {}) > 0 then
    vim.list_extend(lines, { "## Dead ends", "" })
    for _, d in ipairs(r.dead_ends) do
      table.insert(lines, string.format("- %s: %d of %d lines written survive", d.file or "?", d.lines_surviving or 0, d.lines_written or 0))
    end
  end
  return lines
end

--- :EngramReview [RANGE] — the provenance of a range of commits (default: the branch against its
--- upstream) in a scratch buffer.
function M.review(range, on_done)
  local client = need_client(true)
  if not client then
    return
  end
  range = (range and range ~= "") and range or M.default_review_range(client.config.root_dir or vim.fn.getcwd())
  request(client, "engram/review", { range = range }, function(err, result)
    if err then
      notify("review failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    M.state.review = result
    local buf = scratch("engram://review", M.render_review(result))
    if on_done then
      on_done(result, buf)
    end
  end)
end

--- engram/stats's answer as Markdown lines.
function M.render_stats(s)
  local lines = { string.format("# Engram stats by %s", s.by), "" }
  if s.scope then
    table.insert(lines, s.scope == "all" and "Scope: every indexed session" or ("Scope: sessions in `" .. s.scope .. "`"))
    table.insert(lines, "")
  end
  table.insert(lines, string.format("| %s | sessions | input | output | cache read | cache write | cost | lines at HEAD |", s.by))
  table.insert(lines, "|---|---:|---:|---:|---:|---:|---:|---:|")
  local function row(name, r)
    local cost = type(r.cost_usd) == "number" and string.format("$%.2f", r.cost_usd) or "unknown"
    return string.format("| %s | %d | %d | %d | %d | %d | %s | %d |", name, r.sessions or 0, r.input_tokens or 0,
      r.output_tokens or 0, r.cache_read_tokens or 0, r.cache_write_tokens or 0, cost, r.lines_at_head or 0)
  end
  for _, r in ipairs(s.rows or {}) do
    table.insert(lines, row(r.key, r))
  end
  table.insert(lines, row("**total**", s.total or {}))
  local head = type(s.head) == "table" and s.head or nil
  if head then
    table.insert(lines, "")
    table.insert(lines, string.format("Agent-written lines at HEAD: %d of %d (%s).", head.agent_lines or 0, head.lines or 0,
      pct0(head.agent_share ~= vim.NIL and head.agent_share or nil)))
  end
  return lines
end

--- :EngramStats [BY] [all] — sessions, tokens, cost, agent lines at HEAD.
function M.stats(args, on_done)
  args = args or {}
  local client = need_client(true)
  if not client then
    return
  end
  local params = { by = args[1] or "model", all = args[2] == "all" }
  request(client, "engram/stats", params, function(err, result)
    if err then
      notify("stats failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    M.state.stats = result
    local buf = scratch("engram://stats", M.render_stats(result))
    if on_done then
      on_done(result, buf)
    end
  end)
end

M.note_kinds = { "warning", "decision", "discovery", "todo" }

--- :[range]EngramNote KIND TEXT — a note on the lines (saved buffers only: a note keeps the lines as
--- they are on disk).
function M.note(line1, line2, kind, text, on_done)
  local client = need_client()
  if not client then
    return
  end
  local bufnr = vim.api.nvim_get_current_buf()
  if not vim.tbl_contains(M.note_kinds, kind or "") or not text or text == "" then
    notify("usage: :[range]EngramNote " .. table.concat(M.note_kinds, "|") .. " TEXT", vim.log.levels.WARN)
    return
  end
  if vim.bo[bufnr].modified then
    notify("save the file first: a note keeps the lines as they are on disk", vim.log.levels.WARN)
    return
  end
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    range = { start = { line = line1 - 1, character = 0 }, ["end"] = { line = line2, character = 0 } },
    kind = kind, text = text,
  }
  request(client, "engram/note", params, function(err, result)
    if err then
      notify("note failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    M.state.note = result
    notify(string.format("%s note added to lines %d-%d", kind, line1, line2))
    if on_done then
      on_done(result)
    end
  end, bufnr)
end

M.verdicts = { "helpful", "not_relevant", "incorrect" }

--- :EngramFeedback VERDICT [N] — feedback on session N (default 1) of the last :EngramExplain,
--- about the span it explained.
function M.feedback(verdict, n, on_done)
  local client = need_client(true)
  if not client then
    return
  end
  if not vim.tbl_contains(M.verdicts, verdict or "") then
    notify("usage: :EngramFeedback " .. table.concat(M.verdicts, "|") .. " [N]", vim.log.levels.WARN)
    return
  end
  local last, query = M.state.last_explain, M.state.last_explain_query
  local session = last and (last.sessions or {})[tonumber(n) or 1]
  if not session then
    notify("no such session: run :EngramExplain first", vim.log.levels.WARN)
    return
  end
  local params = { session = session.tape_id, verdict = verdict }
  if query then
    params.textDocument, params.range = { uri = query.uri }, query.range
  end
  request(client, "engram/feedback", params, function(err, result)
    if err then
      notify("feedback failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    M.state.feedback = result
    notify(string.format("feedback %s recorded (confidence now %s)", verdict, pct0(result.confidence)))
    if on_done then
      on_done(result)
    end
  end)
end

-- Code lens clicks (vim.lsp.codelens.run) execute `engram.explain` on the server and get the
-- result back; show it the same way as :EngramExplain.
vim.lsp.commands = vim.lsp.commands or {}
vim.lsp.commands["engram.explain"] = function(command, ctx)
  local client = vim.lsp.get_client_by_id(ctx.client_id)
  if not client then
    return
  end
  request(client, "workspace/executeCommand", { command = command.command, arguments = command.arguments },
    function(err, result)
      if err then
        notify("explain failed: " .. (err.message or ""), vim.log.levels.ERROR)
        return
      end
      M.state.last_explain = result
      local buf = show_markdown("engram://explain", M.render_explain(result), M.config.explain.layout)
      if buf then
        vim.b[buf].engram_explain = result
      end
    end, ctx.bufnr)
end

return M
