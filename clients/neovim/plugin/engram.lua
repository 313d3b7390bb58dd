-- Commands only; everything else loads on first use (`require("engram")`).
if vim.g.loaded_engram then
  return
end
vim.g.loaded_engram = true

vim.api.nvim_create_user_command("EngramExplain", function(cmd)
  require("engram").explain({ range = cmd.range > 0 and { cmd.line1, cmd.line2 } or nil, split = cmd.bang })
end, { range = true, bang = true, desc = "Engram: sessions and reasoning behind the current function or range (! = split)" })

vim.api.nvim_create_user_command("EngramView", function(cmd)
  require("engram").view(cmd.fargs)
end, {
  nargs = "*",
  desc = "Engram: step through a tape (:EngramView [next|prev|TAPE_ID [AT]])",
  complete = function()
    return { "next", "prev" }
  end,
})

vim.api.nvim_create_user_command("EngramStatus", function()
  require("engram").status()
end, { desc = "Engram: index status" })

vim.api.nvim_create_user_command("EngramReindex", function()
  require("engram").reindex()
end, { desc = "Engram: rebuild the index" })

vim.api.nvim_create_user_command("EngramAnnotate", function(cmd)
  require("engram").annotate(cmd.fargs[1])
end, {
  nargs = "?",
  desc = "Engram: mark each line by the session that wrote it (:EngramAnnotate [on|off], no argument toggles)",
  complete = function()
    return { "on", "off" }
  end,
})
