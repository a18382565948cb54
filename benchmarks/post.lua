-- POST a JSON-RPC tools/call of TOOL (default add) with one bearer token (TOKEN) or a different
-- one per request, cycling through the lines of TOKENS_FILE; with SESSION, in that MCP session
-- (Mcp-Session-Id). With CHECK_RESULT, an answer without a JSON-RPC result (a 200 carrying an
-- error) is counted and printed at the end as "JSON-RPC errors: N".
local tool = os.getenv("TOOL")
if not tool or #tool == 0 then tool = "add" end
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"' .. tool
  .. '","arguments":{"a":2,"b":3}}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
local session = os.getenv("SESSION")
if session and #session > 0 then
  wrk.headers["Mcp-Session-Id"] = session
end
local token = os.getenv("TOKEN")
if token and #token > 0 then
  wrk.headers["Authorization"] = "Bearer " .. token
end
local tokens = {}
local file = os.getenv("TOKENS_FILE")
if file and #file > 0 then
  for line in io.lines(file) do tokens[#tokens + 1] = line end
end
local i = 0
if #tokens > 0 then
  request = function()
    i = i + 1
    if i > #tokens then i = 1 end
    wrk.headers["Authorization"] = "Bearer " .. tokens[i]
    return wrk.format()
  end
end
local check = os.getenv("CHECK_RESULT")
if check and #check > 0 then
  local threads = {}
  rpc_errors = 0
  setup = function(thread)
    threads[#threads + 1] = thread
  end
  response = function(status, headers, body)
    if status == 200 and not string.find(body, '"result"', 1, true) then
      rpc_errors = rpc_errors + 1
    end
  end
  done = function(summary, latency, requests)
    local total = 0
    for _, thread in ipairs(threads) do total = total + (thread:get("rpc_errors") or 0) end
    io.write(string.format("JSON-RPC errors: %d\n", total))
  end
end
