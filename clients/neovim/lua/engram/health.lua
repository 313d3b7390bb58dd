-- :checkhealth engram
local M = {}

function M.check()
  local health = vim.health
  health.start("engram")
  if vim.fn.has("nvim-0.10") == 1 then
    health.ok("Neovim " .. tostring(vim.version()))
  else
    health.error("Neovim >= 0.10 is required", { "Upgrade Neovim" })
  end
  if vim.lsp.config and vim.lsp.enable then
    health.ok("using vim.lsp.config / vim.lsp.enable")
  else
    health.info("vim.lsp.config not available: starting the server with vim.lsp.start")
  end

  local engram = require("engram")
  local cfg = engram.server_config()
  local exe = cfg.cmd and cfg.cmd[1]
  if exe and vim.fn.executable(exe) == 1 then
    health.ok(string.format("server command: %s (%s)", table.concat(cfg.cmd, " "), vim.fn.exepath(exe)))
  else
    health.error(string.format("server command not found: %s", tostring(exe)), {
      "pip install engram (it provides `engram-lsp`)",
      'or: require("engram").setup({ cmd = { "/path/to/python", "-m", "engram_lsp" } })',
    })
  end

  local get = vim.lsp.get_clients or vim.lsp.get_active_clients
  local clients = get({ name = "engram" })
  if #clients == 0 then
    health.warn("no engram-lsp client is running", { "Open a file inside a repository (a .git or .engram directory)" })
  end
  for _, client in ipairs(clients) do
    health.ok(string.format("client %d running, root %s", client.id, client.config.root_dir or "?"))
    local ok, res = pcall(function()
      if vim.fn.has("nvim-0.11") == 1 then
        return client:request_sync("engram/status", {}, 3000)
      end
      return client.request_sync("engram/status", {}, 3000)
    end)
    if ok and res and res.result then
      local counts = type(res.result.counts) == "table" and res.result.counts or {}
      health.ok(string.format("index %s: %s sessions, %s live", res.result.index, counts.sessions or 0,
        counts.live_sessions or 0))
    else
      health.warn("engram/status did not answer: " .. vim.inspect(res and res.err or res))
    end
  end
  if engram.config.codelens then
    health.ok("code lenses on (refreshed on BufEnter, InsertLeave, BufWritePost and server request)")
  end
end

return M
