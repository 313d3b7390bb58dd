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

vim.api.nvim_create_user_command("EngramReview", function(cmd)
  require("engram").review(cmd.args)
end, { nargs = "?", desc = "Engram: the provenance of a range of commits (:EngramReview [A..B], default: the branch against its upstream)" })

vim.api.nvim_create_user_command("EngramStats", function(cmd)
  require("engram").stats(cmd.fargs)
end, {
  nargs = "*",
  desc = "Engram: sessions, tokens, cost, agent lines at HEAD (:EngramStats [model|harness|week|file|session] [all])",
  complete = function(_, line)
    return #vim.split(line, "%s+") <= 2 and { "model", "harness", "week", "file", "session" } or { "all" }
  end,
})

vim.api.nvim_create_user_command("EngramNote", function(cmd)
  local kind, text = cmd.args:match("^(%S+)%s+(.+)$")
  require("engram").note(cmd.line1, cmd.line2, kind, text)
end, {
  range = true,
  nargs = "+",
  desc = "Engram: a note on the lines (:[range]EngramNote warning|decision|discovery|todo TEXT)",
  complete = function()
    return { "warning", "decision", "discovery", "todo" }
  end,
})

vim.api.nvim_create_user_command("EngramFeedback", function(cmd)
  require("engram").feedback(cmd.fargs[1], cmd.fargs[2])
end, {
  nargs = "+",
  desc = "Engram: feedback on session N of the last explain (:EngramFeedback helpful|not_relevant|incorrect [N])",
  complete = function()
    return { "helpful", "not_relevant", "incorrect" }
  end,
})
