-- Server configuration for `vim.lsp.config` (nvim-lspconfig's `lsp/` convention).
-- `require("engram").setup()` layers its options over this table; used as is, it works too:
--   vim.lsp.enable("engram")
---@type vim.lsp.Config
return {
  cmd = { "engram-lsp" },
  -- no `filetypes`: Engram explains any text file
  root_markers = { ".engram", ".git" },
  init_options = {},
  settings = { engram = {} },
  capabilities = {
    workspace = {
      -- Neovim does not advertise this itself; the plugin handles the request (see init.lua)
      codeLens = { refreshSupport = true },
    },
  },
  handlers = {
    ["workspace/codeLens/refresh"] = function(_, _, ctx)
      local ok, engram = pcall(require, "engram")
      if ok and engram.on_codelens_refresh then
        engram.on_codelens_refresh(ctx)
      else
        vim.lsp.codelens.refresh()
      end
      return vim.NIL
    end,
  },
}
